// Package deviceplugin is the node agent's kubelet device plugin: it
// advertises nvidia.com/gpu with one device per entry of the node's
// gpusched.io/gpu-devices inventory (a whole GPU, or a MIG device), so the
// kubelet admits pods that request whole GPUs and counts them.
//
// It does not choose GPUs. The kubelet calls Allocate with device IDs it
// picked itself, without knowing which pod it is allocating for, and may call
// it in any order; a device plugin that acted on those IDs would contradict
// the scheduler's gpusched.io/gpu-assigned decision. So Allocate only marks
// the container (GPUSCHED_DEVICE_PLUGIN_GPUS=<count>) and the NRI plugin,
// which sees the pod, gives the container the assigned GPUs. The kubelet's
// own per-device bookkeeping (which IDs it believes each pod holds) is
// therefore not the truth; the assignment annotation is.
//
// On a node where NVIDIA's device plugin is already registered (a live
// socket named nvidia*.sock in the device-plugin directory) the agent does
// not register: two plugins cannot serve one resource name. It checks again
// while it serves, and reports NVIDIA's plugin when it appears later (the
// kubelet then follows whichever registered last). Either way the NRI
// plugin treats what NVIDIA's plugin adds to a container as GPU demand and
// confines it to the pod's assignment.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// EnvGPUs is the variable Allocate sets: the number of nvidia.com/gpu the
// kubelet allocated to the container (it is the NRI plugin's
// EnvDevicePluginGPUs).
const EnvGPUs = "GPUSCHED_DEVICE_PLUGIN_GPUS"

// Config locates the kubelet's device-plugin directory.
type Config struct {
	// Dir is the kubelet's device-plugin directory; pluginapi.DevicePluginPath
	// when "".
	Dir string
	// Socket is the plugin's socket name in Dir; "gpusched-gpu.sock" when "".
	Socket string
	// CheckInterval is how often the plugin checks that its socket still
	// exists (the kubelet removes every socket when it restarts, and plugins
	// must then register again); 5s when 0.
	CheckInterval time.Duration
}

func (c *Config) defaults() {
	if c.Dir == "" {
		c.Dir = pluginapi.DevicePluginPath
	}
	if c.Socket == "" {
		c.Socket = "gpusched-gpu.sock"
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = 5 * time.Second
	}
}

// Plugin is the device plugin. It implements pluginapi.DevicePluginServer.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg   Config
	store *discovery.Store
	// seenNVIDIA is NVIDIA's plugin's socket when last checked, or "".
	seenNVIDIA string
}

// New returns a plugin advertising the devices of store.
func New(cfg Config, store *discovery.Store) *Plugin {
	cfg.defaults()
	return &Plugin{cfg: cfg, store: store}
}

// NVIDIAPlugin returns the path of a live NVIDIA device plugin socket in dir
// (nvidia*.sock that accepts a connection), or "".
func NVIDIAPlugin(dir string) string {
	matches, _ := filepath.Glob(filepath.Join(dir, "nvidia*.sock"))
	for _, path := range matches {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			_ = conn.Close()
			return path
		}
	}
	return ""
}

// Run serves the plugin and registers it with the kubelet, again whenever
// the kubelet restarts, until ctx is done. When NVIDIA's device plugin is
// registered it logs what that means and returns without registering.
func (p *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if other := NVIDIAPlugin(p.cfg.Dir); other != "" {
		logger.Info("NVIDIA's device plugin is registered; the agent does not register its own",
			"socket", other,
			"guaranteed", "containers open exactly the GPUs of their gpu-assigned annotation: the NRI plugin denies the others NVIDIA's plugin passes and refuses its foreign device-list mounts",
			"notGuaranteed", "the kubelet's nvidia.com/gpu device IDs follow NVIDIA's plugin's choice, and GPU containers whose volume-mount device list names other GPUs are refused; disable it on gpusched nodes, or use its envvar strategy")
		return nil
	}
	for ctx.Err() == nil {
		if err := p.serve(ctx); err != nil {
			logger.Error(err, "device plugin stopped; restarting")
			select {
			case <-ctx.Done():
			case <-time.After(p.cfg.CheckInterval):
			}
		}
	}
	return nil
}

// serve listens on the plugin socket, registers with the kubelet and serves
// until ctx is done or the socket file disappears.
func (p *Plugin) serve(ctx context.Context) error {
	path := filepath.Join(p.cfg.Dir, p.cfg.Socket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer srv.Stop()

	if err := p.register(ctx); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("device plugin registered with the kubelet", "resource", gpu.ResourceGPU, "socket", path)
	tick := time.NewTicker(p.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return fmt.Errorf("serving %s: %w", path, err)
		case <-tick.C:
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("socket %s is gone (kubelet restart?): registering again", path)
			}
			other := NVIDIAPlugin(p.cfg.Dir)
			if other != "" && other != p.seenNVIDIA {
				klog.FromContext(ctx).Info("NVIDIA's device plugin registered after the agent's: the kubelet now follows it for nvidia.com/gpu; "+
					"containers still open only their assigned GPUs (the NRI plugin confines what it adds)", "socket", other)
			}
			p.seenNVIDIA = other
		}
	}
}

func (p *Plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.cfg.Dir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet socket %s: %w", kubelet, err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.Socket,
		ResourceName: string(gpu.ResourceGPU),
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet at %s: %w", gpu.ResourceGPU, kubelet, err)
	}
	return nil
}

// GetDevicePluginOptions: no PreStartContainer, no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices now and after every inventory change: one
// device per inventory entry, ID its UUID, Unhealthy when the agent marked it
// (the kubelet then stops counting it in allocatable), with its NUMA node.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	changed, unsubscribe := p.store.Subscribe()
	defer unsubscribe()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: Devices(p.store.Current())}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Devices converts a snapshot into the kubelet's device list (none for nil).
func Devices(snap *discovery.Snapshot) []*pluginapi.Device {
	if snap == nil {
		return nil
	}
	out := make([]*pluginapi.Device, 0, len(snap.Devices))
	for i, d := range snap.Devices {
		dev := &pluginapi.Device{ID: d.UUID, Health: pluginapi.Healthy}
		if dev.ID == "" {
			dev.ID = strconv.Itoa(d.Index)
		}
		if d.Unhealthy != "" {
			dev.Health = pluginapi.Unhealthy
		}
		if i < len(snap.NUMANodes) && snap.NUMANodes[i] >= 0 {
			dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(snap.NUMANodes[i])}}}
		}
		out = append(out, dev)
	}
	return out
}

// Allocate marks each container with the number of GPUs the kubelet gave it
// and nothing else: no device IDs, device nodes or mounts (see the package
// comment for why).
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{EnvGPUs: strconv.Itoa(len(c.GetDevicesIds()))},
		})
	}
	return resp, nil
}

// GetPreferredAllocation is not offered (see GetDevicePluginOptions).
func (p *Plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer is not offered.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
