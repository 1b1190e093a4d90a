// Package deviceplugin is the node agent's kubelet device plugins: one
// advertises nvidia.com/gpu with one device per entry of the node's
// gpusched.io/gpu-devices inventory (a whole GPU, or a MIG device), so the
// kubelet admits pods that request whole GPUs and counts them; the other
// (NewShares) advertises gpusched.io/gpu-milli, 1000 units per entry, so the
// kubelet counts the shares pods ask for as a resource, as quota does
// (docs/quotas.md).
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
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// EnvGPUs is the variable Allocate sets: the number of nvidia.com/gpu the
// kubelet allocated to the container (it is the NRI plugin's
// EnvDevicePluginGPUs).
const EnvGPUs = "GPUSCHED_DEVICE_PLUGIN_GPUS"

// EnvMilli is the variable the shares plugin's Allocate sets: the
// gpusched.io/gpu-milli the kubelet allocated to the container (the NRI
// plugin's EnvDevicePluginMilli).
const EnvMilli = "GPUSCHED_DEVICE_PLUGIN_MILLI"

// advertised is what one plugin advertises to the kubelet.
type advertised struct {
	name v1.ResourceName
	// socket is the plugin's socket name when Config.Socket is "".
	socket string
	// env is the variable Allocate sets to the number of units allocated.
	env string
	// devices lists a snapshot's units.
	devices func(*discovery.Snapshot) []*pluginapi.Device
	// yieldsToNVIDIA: NVIDIA's device plugin serves the same name, and two
	// plugins cannot.
	yieldsToNVIDIA bool
}

var (
	wholeGPUs = advertised{name: gpu.ResourceGPU, socket: "gpusched-gpu.sock", env: EnvGPUs, devices: Devices, yieldsToNVIDIA: true}
	shares    = advertised{name: gpu.ResourceMilli, socket: "gpusched-gpu-milli.sock", env: EnvMilli, devices: MilliDevices}
)

// Config locates the kubelet's device-plugin directory.
type Config struct {
	// Dir is the kubelet's device-plugin directory; pluginapi.DevicePluginPath
	// when "".
	Dir string
	// Socket is the plugin's socket name in Dir; "gpusched-gpu.sock" when ""
	// (the shares plugin's: "gpusched-gpu-milli.sock").
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
	if c.CheckInterval <= 0 {
		c.CheckInterval = 5 * time.Second
	}
}

// Plugin is the device plugin. It implements pluginapi.DevicePluginServer.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg   Config
	res   advertised
	store *discovery.Store
	// seenNVIDIA is NVIDIA's plugin's socket when last checked, or "".
	seenNVIDIA string
}

// New returns the plugin advertising the devices of store as nvidia.com/gpu.
func New(cfg Config, store *discovery.Store) *Plugin {
	return newPlugin(cfg, wholeGPUs, store)
}

// NewShares returns the plugin advertising gpusched.io/gpu-milli, 1000 units
// per device of store (MilliDevices). It registers beside NVIDIA's device
// plugin too, which does not serve that name.
func NewShares(cfg Config, store *discovery.Store) *Plugin {
	return newPlugin(cfg, shares, store)
}

func newPlugin(cfg Config, res advertised, store *discovery.Store) *Plugin {
	cfg.defaults()
	if cfg.Socket == "" {
		cfg.Socket = res.socket
	}
	return &Plugin{cfg: cfg, res: res, store: store}
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
	if other := NVIDIAPlugin(p.cfg.Dir); other != "" && p.res.yieldsToNVIDIA {
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
	klog.FromContext(ctx).Info("device plugin registered with the kubelet", "resource", p.res.name, "socket", path)
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
			if other != "" && other != p.seenNVIDIA && p.res.yieldsToNVIDIA {
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
		ResourceName: string(p.res.name),
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet at %s: %w", p.res.name, kubelet, err)
	}
	return nil
}

// GetDevicePluginOptions: no PreStartContainer, no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices now and after every inventory change
// (Devices, or MilliDevices for the shares plugin).
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	changed, unsubscribe := p.store.Subscribe()
	defer unsubscribe()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.res.devices(p.store.Current())}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Devices converts a snapshot into the kubelet's nvidia.com/gpu device list
// (none for nil): one device per inventory entry, ID its UUID, Unhealthy
// when the agent marked it (the kubelet then stops counting it in
// allocatable), with its NUMA node.
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

// MilliDevices converts a snapshot into the kubelet's gpusched.io/gpu-milli
// device list (none for nil): gpu.MilliPerGPU units per inventory entry, IDs
// "<entry>-<unit>" (short, so that a node of gpu.MaxDevicesPerNode GPUs
// lists well under the kubelet's 4 MiB message limit), every one Healthy and
// without NUMA node.
//
// The units are a counter, not devices: the kubelet picks unit IDs without
// knowing which GPU GPUPlacement gave the pod, so no unit stands for a
// place on a GPU, and the kubelet only checks that the node's shares sum to
// no more than its GPUs hold, which every placement GPUPlacement makes
// keeps. So a GPU's health does not reach its units: an unhealthy GPU's
// units taken out of allocatable could refuse a share GPUPlacement put on a
// healthy GPU (the kubelet may hold those very IDs for pods on other GPUs);
// GPUPlacement itself keeps new pods off unhealthy GPUs. And a NUMA node
// would let the topology manager refuse a pod for the unit IDs it picked.
func MilliDevices(snap *discovery.Snapshot) []*pluginapi.Device {
	if snap == nil {
		return nil
	}
	out := make([]*pluginapi.Device, 0, len(snap.Devices)*gpu.MilliPerGPU)
	for i := range snap.Devices {
		entry := strconv.Itoa(i) + "-"
		for unit := range gpu.MilliPerGPU {
			out = append(out, &pluginapi.Device{ID: entry + strconv.Itoa(unit), Health: pluginapi.Healthy})
		}
	}
	return out
}

// Allocate marks each container with the number of units (GPUs, or
// milli-GPU for the shares plugin) the kubelet gave it and nothing else: no
// device IDs, device nodes or mounts (see the package comment for why).
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{p.res.env: strconv.Itoa(len(c.GetDevicesIds()))},
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
