package nri_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

const thisNode = "gpu-node-0"

// uuid is the UUID of test GPU i.
func uuid(i int) string { return fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i) }

// eightGPUs is the inventory of an 8-GPU node.
func eightGPUs(t testing.TB) *discovery.Store {
	t.Helper()
	devices := make([]gpu.Device, 8)
	for i := range devices {
		devices[i] = gpu.Device{Index: i, UUID: uuid(i), Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Group: "nvlink-0"}
	}
	snap, err := discovery.SnapshotOf(devices)
	if err != nil {
		t.Fatal(err)
	}
	store := &discovery.Store{}
	store.Set(snap)
	return store
}

// runtime is the runtime side of NRI, in process: the same adaptation
// containerd and CRI-O embed, listening on a unix socket in a temporary
// directory. It keeps the pods and containers it has "created", for
// Synchronize.
type runtime struct {
	t      testing.TB
	socket string
	nri    *adaptation.Adaptation
	pods   map[string]*api.PodSandbox
	ctrs   map[string]*api.Container
}

func startRuntime(t testing.TB) *runtime {
	t.Helper()
	return startRuntimeIn(t, t.TempDir())
}

// startRuntimeIn starts the runtime side with its socket in dir.
func startRuntimeIn(t testing.TB, dir string) *runtime {
	t.Helper()
	logrus.SetLevel(logrus.ErrorLevel)
	r := &runtime{t: t, socket: filepath.Join(dir, "nri.sock"), pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	if len(r.socket) > 100 {
		t.Fatalf("socket path %s is too long for a unix socket", r.socket)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	r.nri, err = adaptation.New("test-runtime", "2.1.0", r.synchronize, r.update,
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		adaptation.WithSocketPath(r.socket))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nri.Stop)
	return r
}

func (r *runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, p := range r.pods {
		pods = append(pods, p)
	}
	for _, c := range r.ctrs {
		ctrs = append(ctrs, c)
	}
	_, err := cb(ctx, pods, ctrs)
	return err
}

func (r *runtime) update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// create asks the plugins to adjust a new container of pod, as the runtime
// does at CRI CreateContainer; on success the container is kept as running.
func (r *runtime) create(pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	b := r.nri.BlockPluginSync()
	defer b.Unblock()
	r.pods[pod.Id] = pod
	ctr.PodSandboxId = pod.Id
	resp, err := r.nri.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	r.ctrs[ctr.Id] = ctr
	if err := r.nri.PostCreateContainer(context.Background(), &api.PostCreateContainerRequest{Pod: pod, Container: ctr}); err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

// stopPod stops a pod sandbox, as the kubelet does when the pod ends: its
// containers go.
func (r *runtime) stopPod(pod *api.PodSandbox) error {
	b := r.nri.BlockPluginSync()
	defer b.Unblock()
	for id, c := range r.ctrs {
		if c.PodSandboxId == pod.Id {
			delete(r.ctrs, id)
		}
	}
	delete(r.pods, pod.Id)
	return r.nri.StopPodSandbox(context.Background(), &api.StopPodSandboxRequest{Pod: pod})
}

// startAgent connects the agent's plugin to the runtime through
// pkg/stub and waits until it has synchronized.
func startAgent(t testing.TB, r *runtime, cfg agentnri.Config, store *discovery.Store) (*agentnri.Plugin, context.CancelFunc) {
	t.Helper()
	p, err := agentnri.New(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, r.socket, 20*time.Millisecond); close(done) }()
	stop := func() {
		cancel()
		<-done
		// The runtime fails requests while it still holds the closed
		// connection (the plugin's failure policy); wait until it drops it.
		for range 100 {
			if _, err := r.create(pod("probe", "probe", nil), container("probe")); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		delete(r.ctrs, "probe")
	}
	t.Cleanup(stop)
	waitReady(t, p)
	return p, stop
}

// waitReady waits until both of the plugin's connections have registered
// and synchronized.
func waitReady(t testing.TB, p *agentnri.Plugin) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !p.Ready() || !p.Observing() {
		if time.Now().After(deadline) {
			t.Fatal("the agent's NRI plugin did not register and synchronize within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pod builds a pod sandbox with the given annotations.
func pod(ns, name string, annotations map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sandbox-" + ns + "-" + name, Name: name, Namespace: ns, Uid: "uid-" + name, Annotations: annotations}
}

// container builds a container with the given environment.
func container(id string, env ...string) *api.Container {
	return &api.Container{Id: id, Name: id, Env: env}
}
