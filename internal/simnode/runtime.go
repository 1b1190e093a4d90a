package simnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
)

// maxSocketPath is the longest path a unix socket may have on Linux
// (sockaddr_un.sun_path less its terminating NUL).
const maxSocketPath = 107

// Runtime is the runtime side of NRI for one simulated node: the adaptation
// containerd and CRI-O embed, listening on a unix socket, that relays
// container creation to the connected plugins and merges their adjustments.
// It keeps the pod sandboxes and containers it has created, which it hands
// to a plugin that (re)connects at Synchronize, as a real runtime does.
type Runtime struct {
	socket string
	nri    *adaptation.Adaptation

	mu   sync.Mutex
	pods map[string]*api.PodSandbox
	ctrs map[string]*api.Container
}

// StartRuntime starts the runtime side with its socket, plugin and plugin
// configuration directories in dir (created if missing). dir must be short
// enough for a unix socket path.
func StartRuntime(dir string) (*Runtime, error) {
	r := &Runtime{socket: filepath.Join(dir, "nri.sock"), pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	if len(r.socket) > maxSocketPath {
		return nil, fmt.Errorf("NRI socket path %s is longer than a unix socket allows (%d bytes)", r.socket, maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		return nil, fmt.Errorf("NRI runtime directory: %w", err)
	}
	var err error
	r.nri, err = adaptation.New("gpusched-simnode", "2.1.0", r.synchronize, r.update,
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		adaptation.WithSocketPath(r.socket))
	if err != nil {
		return nil, fmt.Errorf("NRI runtime: %w", err)
	}
	if err := r.nri.Start(); err != nil {
		return nil, fmt.Errorf("starting the NRI runtime on %s: %w", r.socket, err)
	}
	return r, nil
}

// Socket is the path plugins connect to.
func (r *Runtime) Socket() string { return r.socket }

// Stop closes the socket and the plugins' connections.
func (r *Runtime) Stop() { r.nri.Stop() }

// CreateContainer does what the runtime does at CRI CreateContainer: it
// announces the pod sandbox to the plugins the first time it sees it
// (RunPodSandbox), then asks them for the container's adjustment. On success
// the container is kept as running; a plugin's refusal is returned as the
// error the kubelet would report.
func (r *Runtime) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	// As containerd does, no plugin synchronizes while a request is relayed.
	block := r.nri.BlockPluginSync()
	defer block.Unblock()

	r.mu.Lock()
	_, known := r.pods[pod.GetId()]
	r.mu.Unlock()
	if !known {
		if err := r.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
			return nil, fmt.Errorf("NRI RunPodSandbox of %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
		}
		r.mu.Lock()
		r.pods[pod.GetId()] = pod
		r.mu.Unlock()
	}
	ctr.PodSandboxId = pod.GetId()
	resp, err := r.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	r.mu.Lock()
	r.ctrs[ctr.GetId()] = ctr
	r.mu.Unlock()
	if err := r.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr}); err != nil {
		return nil, fmt.Errorf("NRI PostCreateContainer of %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
	}
	return resp.GetAdjust(), nil
}

// StopPodSandbox does what the runtime does when the kubelet stops a pod's
// sandbox (the pod ended or was deleted): its containers go, and the
// plugins are told.
func (r *Runtime) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	block := r.nri.BlockPluginSync()
	defer block.Unblock()
	r.mu.Lock()
	for id, c := range r.ctrs {
		if c.GetPodSandboxId() == pod.GetId() {
			delete(r.ctrs, id)
		}
	}
	delete(r.pods, pod.GetId())
	r.mu.Unlock()
	if err := r.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("NRI StopPodSandbox of %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
	}
	return nil
}

// synchronize hands a connecting plugin every pod and container created so far.
func (r *Runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	r.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(r.pods))
	for _, p := range r.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(r.ctrs))
	for _, c := range r.ctrs {
		ctrs = append(ctrs, c)
	}
	r.mu.Unlock()
	_, err := cb(ctx, pods, ctrs)
	return err
}

// update accepts no container updates: the agent asks for none.
func (r *Runtime) update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// QuietNRILogs drops the log lines of NRI's runtime and plugin sides (both
// log through NRI's package-level logger): a playground or a test with many
// simulated nodes would otherwise print several lines per node and per
// connection. It affects the whole process.
func QuietNRILogs() { nrilog.Set(discard{}) }

type discard struct{}

func (discard) Debugf(context.Context, string, ...any) {}
func (discard) Infof(context.Context, string, ...any)  {}
func (discard) Warnf(context.Context, string, ...any)  {}
func (discard) Errorf(context.Context, string, ...any) {}
