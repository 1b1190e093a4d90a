package defrag

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// maxPlanTimeout is the longest --plan-timeout: half the longest a
// reservation holds GPUs, so that a scheduler whose clock runs behind the
// defragmenter's still holds every reservation.
const maxPlanTimeout = gpu.MaxReservationLifetime / 2

type commandFlags struct {
	kubeconfig, mode, policy, selector, listen string
	leaseNamespace, leaseName                  string
	leaderElect                                bool
	gracePeriod                                int64
	opts                                       Options
}

// NewCommand is `gpusched defragment`.
func NewCommand() *cobra.Command {
	f := commandFlags{mode: string(DryRun), policy: string(gpu.DefaultPolicy), listen: "127.0.0.1:10263",
		leaseNamespace: "kube-system", leaseName: "gpusched-defragmenter", leaderElect: true, gracePeriod: -1,
		opts: Options{Interval: 30 * time.Second, PlanTimeout: 5 * time.Minute, MovesPerHour: 10, MovesPerNodePerHour: 2, MovesPerNamespacePerHour: 5}}
	cmd := &cobra.Command{
		Use:   "defragment",
		Short: "Move running pods so that pending GPU pods fit: plan migrations, and in Enforce mode carry them out",
		Long: `defragment finds, for each GPU pod that fits no node, a few moves of running
pods after which it fits (the engine's migration planner, the scheduler's
policy), and in Enforce mode carries the plan out: it reserves the GPUs the
plan chose on the nodes (the scheduler holds them for the pods they are for),
evicts the moved pods through the Eviction API, and gives the plan up when
its pods do not arrive within --plan-timeout. Only pods owned by a
ReplicaSet, StatefulSet, Job or ReplicationController, opted in with the
annotation gpusched.io/movable=true (or --selector), in no gang, and within
their PodDisruptionBudgets move; never for a pod of lower priority.

DryRun (the default) changes nothing: it records on each pending pod and each
pod it would move what it would do, and counts it in the metrics.
See docs/defragmentation.md.`,
		Example: `  gpusched defragment --kubeconfig ~/.kube/config                 # DryRun: see the events
  gpusched defragment --mode Enforce --selector team=research --moves-per-hour 20`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return f.run(ctx)
		},
	}
	plain := &cobra.Command{}
	cmd.SetUsageFunc(plain.UsageFunc())
	cmd.SetHelpFunc(plain.HelpFunc())
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration)")
	fs.StringVar(&f.mode, "mode", f.mode, "DryRun (record what would move, change nothing) or Enforce (carry plans out)")
	fs.StringSliceVar(&f.opts.SchedulerNames, "scheduler-name", []string{"gpusched"}, "plan for pending pods of these schedulers (spec.schedulerName)")
	fs.StringVar(&f.policy, "policy", f.policy, "the placement policy the scheduler uses; plans place pods as it would")
	fs.StringVar(&f.selector, "selector", "", "label selector of pods that may move beside those annotated gpusched.io/movable=true")
	fs.DurationVar(&f.opts.Interval, "interval", f.opts.Interval, "how often to look for pods to make room for")
	fs.DurationVar(&f.opts.PlanTimeout, "plan-timeout", f.opts.PlanTimeout, "how long a plan's pods have to arrive on the GPUs it reserved before it is given up")
	fs.IntVar(&f.opts.MovesPerHour, "moves-per-hour", f.opts.MovesPerHour, "most pods moved in any hour")
	fs.IntVar(&f.opts.MovesPerNodePerHour, "moves-per-node-per-hour", f.opts.MovesPerNodePerHour, "most pods moved off one node in any hour")
	fs.IntVar(&f.opts.MovesPerNamespacePerHour, "moves-per-namespace-per-hour", f.opts.MovesPerNamespacePerHour, "most pods moved from one namespace in any hour")
	fs.Int64Var(&f.gracePeriod, "eviction-grace-period", f.gracePeriod, "grace period of the evictions in seconds; -1 uses each pod's own")
	fs.StringVar(&f.listen, "metrics-listen", f.listen, "address serving /metrics and /healthz")
	fs.BoolVar(&f.leaderElect, "leader-elect", f.leaderElect, "run only while holding the lease, so that replicas never act at once")
	fs.StringVar(&f.leaseNamespace, "lease-namespace", f.leaseNamespace, "namespace of the leader lease")
	fs.StringVar(&f.leaseName, "lease-name", f.leaseName, "name of the leader lease")
	return cmd
}

// options checks the flags and returns the defragmenter's options.
func (f *commandFlags) options() (Options, error) {
	opts := f.opts
	var err error
	if opts.Mode, err = ParseMode(f.mode); err != nil {
		return opts, fmt.Errorf("--mode: %w", err)
	}
	if _, err := gpu.LookupPolicy(f.policy); err != nil {
		return opts, fmt.Errorf("--policy: %w", err)
	}
	opts.Policy = gpu.PolicyType(f.policy)
	if f.selector != "" {
		if opts.Selector, err = labels.Parse(f.selector); err != nil {
			return opts, fmt.Errorf("--selector %q: %w", f.selector, err)
		}
	}
	for name, v := range map[string]int{"--moves-per-hour": opts.MovesPerHour, "--moves-per-node-per-hour": opts.MovesPerNodePerHour,
		"--moves-per-namespace-per-hour": opts.MovesPerNamespacePerHour} {
		if v < 1 {
			return opts, fmt.Errorf("%s %d: want at least 1", name, v)
		}
	}
	for name, v := range map[string]time.Duration{"--interval": opts.Interval, "--plan-timeout": opts.PlanTimeout} {
		if v <= 0 {
			return opts, fmt.Errorf("%s %s: want a positive duration", name, v)
		}
	}
	if opts.PlanTimeout > maxPlanTimeout {
		return opts, fmt.Errorf("--plan-timeout %s: want at most %s (a reservation holds GPUs for at most %s, and the clocks of the defragmenter and the schedulers may differ)",
			opts.PlanTimeout, maxPlanTimeout, gpu.MaxReservationLifetime)
	}
	opts.Name = f.leaseName
	if f.gracePeriod >= 0 {
		g := f.gracePeriod
		opts.GracePeriodSeconds = &g
	}
	return opts, nil
}

func (f *commandFlags) run(ctx context.Context) error {
	opts, err := f.options()
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("defragment: reading the kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("defragment: %w", err)
	}
	if opts.PodGroups, err = dynamic.NewForConfig(config); err != nil {
		return fmt.Errorf("defragment: %w", err)
	}
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("defragment: --metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	defer server.Close()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "gpusched-defragmenter"})

	run := func(ctx context.Context) error {
		d, err := New(client, recorder, metrics, opts)
		if err != nil {
			return err
		}
		return d.Run(ctx)
	}
	if !f.leaderElect {
		return run(ctx)
	}
	return f.lead(ctx, client, run)
}

// lead runs run while this instance holds the lease, until ctx ends. When
// run fails (the defragmenter could not start, say it may not read the
// events its hourly limits count), the lease is given up and lead returns
// the error: the process exits and another replica takes over, rather
// than hold the lease doing nothing.
func (f *commandFlags) lead(ctx context.Context, client kubernetes.Interface, run func(context.Context) error) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	logger := klog.FromContext(ctx)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var runErr error
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: f.leaseNamespace, Name: f.leaseName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            "gpusched-defragmenter",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading: defragmenting", "identity", identity)
				if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					mu.Lock()
					runErr = err
					mu.Unlock()
					cancel() // releases the lease (ReleaseOnCancel)
				}
			},
			OnStoppedLeading: func() { logger.Info("Not leading", "identity", identity) },
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	for leadCtx.Err() == nil {
		elector.Run(leadCtx)
	}
	mu.Lock()
	defer mu.Unlock()
	return runErr
}
