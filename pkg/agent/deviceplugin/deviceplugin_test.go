package deviceplugin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpusched/gpusched/pkg/agent/deviceplugin"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// kubelet is a test registration server speaking the kubelet's device
// plugin API on <dir>/kubelet.sock.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	registered chan *pluginapi.RegisterRequest
}

func (k *kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.registered <- req
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{registered: make(chan *pluginapi.RegisterRequest, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return k
}

func devices(unhealthy map[int]string) []gpu.Device {
	out := make([]gpu.Device, 4)
	for i := range out {
		out[i] = gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "NVIDIA-L4", MemoryMiB: 23034, Unhealthy: unhealthy[i]}
	}
	return out
}

func setDevices(t *testing.T, store *discovery.Store, unhealthy map[int]string) {
	t.Helper()
	snap, err := discovery.SnapshotOf(devices(unhealthy))
	if err != nil {
		t.Fatal(err)
	}
	snap.NUMANodes = []int{0, 0, 1, -1}
	store.Set(snap)
}

func runPlugin(t *testing.T, cfg deviceplugin.Config, store *discovery.Store) (done chan struct{}, stop func()) {
	t.Helper()
	return run(t, deviceplugin.New(cfg, store))
}

// run runs p until the test ends or stop is called.
func run(t *testing.T, p *deviceplugin.Plugin) (done chan struct{}, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return done, stop
}

// listenAsNVIDIA listens on dir/nvidia-gpu.sock, as NVIDIA's device plugin
// does, until the test ends or the listener is closed.
func listenAsNVIDIA(t *testing.T, dir string) net.Listener {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, "nvidia-gpu.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis
}

// registered waits for a plugin's registration with the kubelet k (5 s at
// most) and returns it with a client of the plugin's socket in dir, closed
// when the test ends.
func registered(t *testing.T, k *kubelet, dir string) (*pluginapi.RegisterRequest, pluginapi.DevicePluginClient) {
	t.Helper()
	var req *pluginapi.RegisterRequest
	select {
	case req = <-k.registered:
	case <-time.After(5 * time.Second):
		t.Fatal("the plugin did not register within 5s")
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return req, pluginapi.NewDevicePluginClient(conn)
}

// TestDevicePluginListAndWatch: the plugin registers nvidia.com/gpu with
// the kubelet, lists the node's devices as healthy with their NUMA nodes,
// reports an XID-marked device Unhealthy, and its Allocate names no device.
func TestDevicePluginListAndWatch(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	store := &discovery.Store{}
	setDevices(t, store, nil)
	runPlugin(t, deviceplugin.Config{Dir: dir, CheckInterval: 20 * time.Millisecond}, store)

	req, client := registered(t, k, dir)
	if req.ResourceName != "nvidia.com/gpu" || req.Version != pluginapi.Version || req.Endpoint != "gpusched-gpu.sock" {
		t.Fatalf("registered %+v", req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	health := func() ([]string, []*pluginapi.Device) {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, d := range resp.Devices {
			hs = append(hs, d.ID+"="+d.Health)
		}
		return hs, resp.Devices
	}
	got, devs := health()
	if want := fmt.Sprint([]string{"GPU-0=Healthy", "GPU-1=Healthy", "GPU-2=Healthy", "GPU-3=Healthy"}); fmt.Sprint(got) != want {
		t.Fatalf("devices %v, want %s", got, want)
	}
	if devs[2].Topology.GetNodes()[0].GetID() != 1 || devs[3].Topology != nil {
		t.Errorf("topology %v / %v, want NUMA node 1 / none", devs[2].Topology, devs[3].Topology)
	}

	setDevices(t, store, map[int]string{1: "XID 79 at 2026-11-24T10:02:11Z"})
	got, _ = health()
	if want := fmt.Sprint([]string{"GPU-0=Healthy", "GPU-1=Unhealthy", "GPU-2=Healthy", "GPU-3=Healthy"}); fmt.Sprint(got) != want {
		t.Fatalf("after XID: devices %v, want %s", got, want)
	}

	alloc, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-2", "GPU-3"}}}})
	if err != nil {
		t.Fatal(err)
	}
	r := alloc.ContainerResponses[0]
	if len(r.Envs) != 1 || r.Envs[agentnri.EnvDevicePluginGPUs] != "2" || len(r.Devices) != 0 || len(r.Mounts) != 0 || len(r.CdiDevices) != 0 {
		t.Fatalf("Allocate answered %+v, want only %s=2", r, agentnri.EnvDevicePluginGPUs)
	}
}

// TestDevicePluginReregistersAfterKubeletRestart: the kubelet removes plugin
// sockets when it restarts; the plugin notices and registers again.
func TestDevicePluginReregistersAfterKubeletRestart(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	store := &discovery.Store{}
	setDevices(t, store, nil)
	runPlugin(t, deviceplugin.Config{Dir: dir, CheckInterval: 20 * time.Millisecond}, store)
	for round := range 2 {
		select {
		case <-k.registered:
		case <-time.After(5 * time.Second):
			t.Fatalf("registration %d did not come within 5s", round+1)
		}
		if round == 0 {
			if err := os.Remove(filepath.Join(dir, "gpusched-gpu.sock")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDevicePluginStepsAsideForNVIDIA: with NVIDIA's device plugin
// listening in the directory the agent does not register, and Run returns.
func TestDevicePluginStepsAsideForNVIDIA(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	lis := listenAsNVIDIA(t, dir)
	if got := deviceplugin.NVIDIAPlugin(dir); got != filepath.Join(dir, "nvidia-gpu.sock") {
		t.Fatalf("NVIDIAPlugin = %q", got)
	}
	store := &discovery.Store{}
	setDevices(t, store, nil)
	done, _ := runPlugin(t, deviceplugin.Config{Dir: dir}, store)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case req := <-k.registered:
		t.Fatalf("registered %+v beside NVIDIA's plugin", req)
	default:
	}

	// A stale socket file nobody listens on is not NVIDIA's plugin.
	lis.Close()
	stale := filepath.Join(dir, "nvidia.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := deviceplugin.NVIDIAPlugin(dir); got != "" {
		t.Fatalf("NVIDIAPlugin = %q for files nobody listens on", got)
	}
}

// TestDevicePluginEnvMatchesNRI: Allocate's markers are the variables the
// NRI plugin looks for.
func TestDevicePluginEnvMatchesNRI(t *testing.T) {
	if deviceplugin.EnvGPUs != agentnri.EnvDevicePluginGPUs {
		t.Fatalf("device plugin sets %s, NRI plugin reads %s", deviceplugin.EnvGPUs, agentnri.EnvDevicePluginGPUs)
	}
	if deviceplugin.EnvMilli != agentnri.EnvDevicePluginMilli {
		t.Fatalf("shares plugin sets %s, NRI plugin reads %s", deviceplugin.EnvMilli, agentnri.EnvDevicePluginMilli)
	}
}

// TestSharesPlugin: the shares plugin registers gpusched.io/gpu-milli on its
// own socket, beside NVIDIA's plugin too; it lists 1000 units per GPU, all
// Healthy even on a GPU with an XID mark and without NUMA node (see
// MilliDevices); and its Allocate marks the container with the units the
// kubelet gave it.
func TestSharesPlugin(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	listenAsNVIDIA(t, dir) // registers beside it all the same
	store := &discovery.Store{}
	setDevices(t, store, map[int]string{1: "XID 79 at 2026-11-24T10:02:11Z"})
	run(t, deviceplugin.NewShares(deviceplugin.Config{Dir: dir, CheckInterval: 20 * time.Millisecond}, store))
	req, client := registered(t, k, dir)
	if req.ResourceName != "gpusched.io/gpu-milli" || req.Endpoint != "gpusched-gpu-milli.sock" {
		t.Fatalf("registered %+v", req)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	stream, err := client.ListAndWatch(rctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// 4 GPUs × 1000 units.
	if len(resp.Devices) != 4000 {
		t.Fatalf("%d units, want 4000", len(resp.Devices))
	}
	ids := map[string]bool{}
	for _, d := range resp.Devices {
		if d.Health != pluginapi.Healthy || d.Topology != nil || ids[d.ID] {
			t.Fatalf("unit %+v: want a distinct, Healthy ID without topology", d)
		}
		ids[d.ID] = true
	}
	if !ids["1-0"] || !ids["3-999"] {
		t.Errorf("unit IDs are not <entry>-<unit>: 1-0 %v, 3-999 %v", ids["1-0"], ids["3-999"])
	}
	units := make([]string, 250)
	for i := range units {
		units[i] = fmt.Sprintf("2-%d", i)
	}
	alloc, err := client.Allocate(rctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: units}}})
	if err != nil {
		t.Fatal(err)
	}
	r := alloc.ContainerResponses[0]
	if len(r.Envs) != 1 || r.Envs[agentnri.EnvDevicePluginMilli] != "250" || len(r.Devices) != 0 || len(r.Mounts) != 0 {
		t.Fatalf("Allocate answered %+v, want only %s=250", r, agentnri.EnvDevicePluginMilli)
	}
}

// TestSharesListFits: the list of a node of gpu.MaxDevicesPerNode GPUs fits
// well within the kubelet's default 4 MiB gRPC message limit.
func TestSharesListFits(t *testing.T) {
	devs := make([]gpu.Device, gpu.MaxDevicesPerNode)
	for i := range devs {
		devs[i] = gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%036d", i), Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559}
	}
	snap, err := discovery.SnapshotOf(devs)
	if err != nil {
		t.Fatal(err)
	}
	size := proto.Size(&pluginapi.ListAndWatchResponse{Devices: deviceplugin.MilliDevices(snap)})
	const limit = 4 << 20
	if size > limit/2 {
		t.Fatalf("%d GPUs list in %d bytes, over half the kubelet's %d", len(devs), size, limit)
	}
	t.Logf("%d GPUs: %d units in %d bytes", len(devs), len(devs)*gpu.MilliPerGPU, size)
}
