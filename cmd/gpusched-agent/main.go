// Command gpusched-agent is gpusched's node agent, run as a DaemonSet on GPU
// nodes. It discovers the node's GPUs through NVML and publishes them in the
// Node's gpusched.io/gpu-devices annotation, gives every container exactly
// the GPUs of its pod's gpusched.io/gpu-assigned annotation through NRI, and
// advertises nvidia.com/gpu to the kubelet through a device plugin. See
// docs/node-agent.md.
package main

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/agent/deviceplugin"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/metrics"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
)

// flags are the agent's command-line settings.
type flags struct {
	nodeName        string
	kubeconfig      string
	nriSocket       string
	nriRetry        time.Duration
	devicePluginDir string
	devicePlugin    bool
	shareResource   bool
	mode            string
	mpsPipeDir      string
	metricsAddress  string
	interval        time.Duration
	criticalXIDs    string
	unrestricted    []string
	sysfsRoot       string
	nvmlMock        string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := newCommand(ctx).Execute(); err != nil {
		os.Exit(1)
	}
}

func newCommand(ctx context.Context) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:          "gpusched-agent",
		Short:        "gpusched's node agent: GPU discovery, exact GPU hand-off through NRI, device plugin",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(klog.NewContext(ctx, klog.Background()), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, set from spec.nodeName in the DaemonSet)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&f.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.DurationVar(&f.nriRetry, "nri-retry", 2*time.Second, "pause before reconnecting to NRI after the runtime went away")
	fs.StringVar(&f.devicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins/", "the kubelet's device-plugin directory")
	fs.BoolVar(&f.devicePlugin, "device-plugin", true, "advertise nvidia.com/gpu to the kubelet (skipped anyway when NVIDIA's device plugin is registered)")
	fs.BoolVar(&f.shareResource, "share-resource", true, "advertise gpusched.io/gpu-milli to the kubelet, 1000 per GPU, so that it counts the shares pods ask for as a resource (docs/quotas.md)")
	fs.StringVar(&f.mode, "mode", string(agentnri.ModeEnv), "how containers get their GPUs: cdi (CDI devices nvidia.com/gpu=<UUID>) or env (NVIDIA_VISIBLE_DEVICES=<UUIDs>)")
	fs.StringVar(&f.mpsPipeDir, "mps-pipe-dir", "", "host directory of the MPS control daemon's pipes; when set, shares get MPS limits and the directory mounted")
	fs.StringVar(&f.metricsAddress, "metrics-address", ":9464", "address for /metrics, /healthz and /readyz; empty disables")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "time between GPU rediscoveries")
	fs.StringVar(&f.criticalXIDs, "critical-xids", joinXIDs(discovery.DefaultCriticalXIDs), "XIDs that mark a GPU unhealthy (see docs/node-agent.md)")
	fs.StringSliceVar(&f.unrestricted, "unrestricted-namespaces", nil,
		"removed: a namespace's name is not an identity (a tenant may create a namespace of that name); annotate the pods "+agentnri.AnnotationUnrestricted+"=true instead (see docs/node-agent.md)")
	fs.StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "where the host's /sys is mounted, for GPUs' NUMA nodes")
	fs.StringVar(&f.nvmlMock, "nvml-mock", "", "use one of go-nvml's mock machines instead of the driver (dgxa100 or dgxh100), for demos and tests")
	gofs := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(gofs)
	fs.AddGoFlagSet(gofs)
	cmd.AddCommand(newInventoryCommand())
	return cmd
}

func run(ctx context.Context, f *flags) error {
	logger := klog.FromContext(ctx)
	xids, err := discovery.ParseXIDs(f.criticalXIDs)
	if err != nil {
		return fmt.Errorf("--critical-xids: %w", err)
	}
	if len(f.unrestricted) > 0 {
		return fmt.Errorf("--unrestricted-namespaces=%s: no longer accepted, because anyone who may create a namespace of that name would get every GPU; "+
			"annotate the pods to leave alone with %s=\"true\" (admitted by the gpusched-unrestricted policy) and drop the flag", strings.Join(f.unrestricted, ","), agentnri.AnnotationUnrestricted)
	}
	nriCfg := agentnri.Config{NodeName: f.nodeName, Mode: agentnri.Mode(f.mode), MPSPipeDir: f.mpsPipeDir}
	if err := nriCfg.Validate(); err != nil {
		return err
	}
	if f.mpsPipeDir != "" {
		if _, err := os.Stat(f.mpsPipeDir); err != nil {
			logger.Info("MPS pipe directory is not there yet; shares get MPS settings anyway and fail to reach the daemon until it runs", "dir", f.mpsPipeDir)
		}
	}
	lib, err := openNVML(f.nvmlMock)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	nodes, err := nodeClient(f.kubeconfig)
	if err != nil {
		return err
	}

	m := metrics.New()
	store := &discovery.Store{}
	publisher := &discovery.Publisher{
		Lib: lib, Nodes: nodes, NodeName: f.nodeName, Store: store, Health: discovery.NewHealth(),
		Interval: f.interval, CriticalXIDs: xids, SysfsRoot: f.sysfsRoot, OnError: m.DiscoveryError, OnXID: m.XID,
	}
	plugin, err := agentnri.New(nriCfg, store, m)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	// NRI first: the agent registers with the runtime before it knows the
	// node's GPUs, so that no container is created without it meanwhile;
	// GPU containers are refused with a clear reason until discovery
	// succeeds, the others get no GPU.
	g.Go(func() error { return plugin.Run(ctx, f.nriSocket, f.nriRetry) })
	g.Go(func() error { return publisher.Run(ctx) })
	g.Go(func() error { countDevices(ctx, store, m); return nil })
	if f.metricsAddress != "" {
		g.Go(func() error { return serveHTTP(ctx, f.metricsAddress, m, store, plugin) })
	}
	if f.devicePlugin {
		dp := deviceplugin.New(deviceplugin.Config{Dir: f.devicePluginDir}, store)
		g.Go(func() error { return dp.Run(ctx) })
	}
	if f.shareResource {
		sp := deviceplugin.NewShares(deviceplugin.Config{Dir: f.devicePluginDir}, store)
		g.Go(func() error { return sp.Run(ctx) })
	}
	logger.Info("gpusched-agent running", "node", f.nodeName, "mode", f.mode, "nri", f.nriSocket, "mps", f.mpsPipeDir)
	return g.Wait()
}

func joinXIDs(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// openNVML initializes the driver's NVML, or a mock machine.
func openNVML(mockName string) (nvml.Interface, error) {
	var lib nvml.Interface
	switch mockName {
	case "":
		lib = nvml.New()
	case "dgxa100":
		lib = nvmlmock.DGXA100()
	case "dgxh100":
		lib = nvmlmock.DGXH100()
	default:
		return nil, fmt.Errorf("--nvml-mock %q: want dgxa100 or dgxh100", mockName)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initializing NVML: %v (is the NVIDIA driver's libnvidia-ml.so.1 mounted into the agent?)", ret)
	}
	return lib, nil
}

// nodeClient builds the client for Nodes: in-cluster, or from a kubeconfig.
func nodeClient(kubeconfig string) (discovery.NodeClient, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API server configuration: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "gpusched-agent"
	return discovery.NewNodeClient(cfg)
}

// countDevices keeps the devices gauge equal to the published inventory.
func countDevices(ctx context.Context, store *discovery.Store, m *metrics.Metrics) {
	changed, unsubscribe := store.Subscribe()
	defer unsubscribe()
	for {
		if snap := store.Current(); snap != nil {
			unhealthy := 0
			for _, d := range snap.Devices {
				if d.Unhealthy != "" {
					unhealthy++
				}
			}
			m.SetDevices(len(snap.Devices)-unhealthy, unhealthy)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// serveHTTP serves /metrics, /healthz (the process runs) and /readyz (GPUs
// discovered and both NRI connections registered with the runtime).
func serveHTTP(ctx context.Context, addr string, m *metrics.Metrics, store *discovery.Store, plugin *agentnri.Plugin) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case store.Current() == nil:
			http.Error(w, "GPUs not discovered yet", http.StatusServiceUnavailable)
		case !plugin.Ready():
			http.Error(w, "not registered with the runtime's NRI", http.StatusServiceUnavailable)
		case !plugin.Observing():
			http.Error(w, "not following the runtime's container events (NRI observer connection)", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server on %s: %w", addr, err)
	}
	return nil
}
