package dashboard

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// commandFlags are `gpusched dashboard`'s flags.
type commandFlags struct {
	kubeconfig     string
	listen         string
	schedulerNames []string
	poolLabel      string
	draDriver      string
	perGPUMetrics  bool
	minInterval    time.Duration
	sampleEvery    time.Duration
}

// NewCommand is `gpusched dashboard`: the Server of a cluster, on --listen.
func NewCommand() *cobra.Command {
	f := commandFlags{listen: "127.0.0.1:8080", perGPUMetrics: true, minInterval: time.Second, sampleEvery: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live view of the cluster's GPUs: a web page, JSON, Server-Sent Events and Prometheus metrics",
		Long: `dashboard watches the cluster's Nodes and Pods, and on a cluster with DRA its
ResourceSlices, ResourceClaims and DeviceClasses (read-only: it needs get, list
and watch on those, nothing else; without the DRA ones it shows no DRA GPUs)
and serves what gpusched sees of its
GPUs: every node and GPU with what holds it, free capacity the typical pods
cannot use (fragmentation), the pending GPU pods in queue order with the
scheduler's reason, and the cluster's allocation and fragmentation over time.

  /              the page          /api/snapshot, /api/node, /api/history  JSON
  /api/events    live updates      /metrics  Prometheus         /healthz

It has no authentication of its own: keep the default loopback --listen and
reach it through kubectl port-forward, or put kube-rbac-proxy in front of it
(deploy/dashboard). See docs/dashboard.md.`,
		Example: `  gpusched dashboard --kubeconfig ~/.kube/config            # then open http://127.0.0.1:8080/
  gpusched dashboard --scheduler-name gpusched --pool-label cloud.google.com/gke-nodepool
  gpusched dashboard --per-gpu-metrics=false                 # a very large cluster`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			config, err := restConfig(f.kubeconfig)
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(config)
			if err != nil {
				return fmt.Errorf("dashboard: %w", err)
			}
			ln, err := net.Listen("tcp", f.listen)
			if err != nil {
				return fmt.Errorf("dashboard: --listen: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Serving the GPU dashboard on http://%s/\n", ln.Addr())
			s := New(client, Options{SchedulerNames: f.schedulerNames, PoolLabel: f.poolLabel, DRADriver: f.draDriver,
				PerGPUMetrics: f.perGPUMetrics, MinInterval: f.minInterval, SampleEvery: f.sampleEvery})
			// SIGINT or SIGTERM shuts the server down and returns nil.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return s.Serve(ctx, ln)
		},
	}
	// Cobra's own help and usage, not those a parent command (kube-scheduler's)
	// would pass down, which list the parent's flags instead of these.
	plain := &cobra.Command{}
	cmd.SetUsageFunc(plain.UsageFunc())
	cmd.SetHelpFunc(plain.HelpFunc())
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", f.kubeconfig, "kubeconfig file of the cluster (default $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration)")
	fs.StringVar(&f.listen, "listen", f.listen, "address to serve on; the dashboard has no authentication of its own, so keep it on loopback unless a proxy in the same pod guards it")
	fs.StringSliceVar(&f.schedulerNames, "scheduler-name", nil, "list only pending pods of these schedulers (spec.schedulerName; default every GPU pod)")
	fs.StringVar(&f.poolLabel, "pool-label", "", "node label naming a node's pool (default the first present of the managed clouds' and Karpenter's node-pool labels, then node.kubernetes.io/instance-type)")
	fs.StringVar(&f.draDriver, "dra-driver", "", "DRA driver whose devices are GPUs: nodes that publish its ResourceSlices show those GPUs, held by ResourceClaims (default NVIDIA's DRA driver)")
	fs.BoolVar(&f.perGPUMetrics, "per-gpu-metrics", f.perGPUMetrics, "export per-GPU series (gpusched_gpu_*: 4 series per GPU); set false on very large clusters, the per-node and cluster series stay")
	fs.DurationVar(&f.minInterval, "min-interval", f.minInterval, "least time between two rebuilds of the snapshot; changes within it are coalesced")
	fs.DurationVar(&f.sampleEvery, "sample-interval", f.sampleEvery, "interval of the allocation and fragmentation time series kept for the page")
	return cmd
}

// restConfig reads the kubeconfig: the path given, else $KUBECONFIG or
// ~/.kube/config, else the in-cluster configuration.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("dashboard: reading the kubeconfig: %w", err)
	}
	return config, nil
}
