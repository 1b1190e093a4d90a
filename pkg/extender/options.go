package extender

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	configv1 "github.com/gpusched/gpusched/pkg/apis/config/v1"
	"github.com/gpusched/gpusched/pkg/apis/config/validation"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Options configure an extender server; they are the gpusched-extender
// command's flags.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty means the in-cluster config.
	Kubeconfig string
	// KubeAPIQPS and KubeAPIBurst limit the client's requests to the API server.
	KubeAPIQPS   float32
	KubeAPIBurst int

	// BindAddress is the host:port the server listens on.
	BindAddress string
	// TLSCertFile and TLSPrivateKeyFile, when both set, make the server speak
	// HTTPS (the scheduler's extender config then sets enableHTTPS and tlsConfig).
	TLSCertFile       string
	TLSPrivateKeyFile string
	// ClientCAFile, when set, makes the API verbs require a client
	// certificate signed by this CA (mutual TLS; the scheduler's tlsConfig
	// sets certFile and keyFile). Required unless BindAddress is loopback.
	ClientCAFile string
	// ClientNames, when set, are the client certificate names (common name
	// or DNS name) allowed to call the API; empty allows every certificate
	// the client CA signed.
	ClientNames []string
	// MaxRequestBytes bounds a request body; larger ones get 413.
	MaxRequestBytes int64
	// ReadHeaderTimeout, ReadTimeout and WriteTimeout are the http.Server's.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	// ShutdownTimeout bounds how long a stopping server waits for requests in flight.
	ShutdownTimeout time.Duration
	// BindSettleAfter is how long after a Binding of unknown outcome ended
	// a read finding the pod unbound releases its GPUs: at least the
	// API server's --request-timeout.
	BindSettleAfter time.Duration

	// LeaderElect makes the instance bind only while it holds the Lease
	// LeaderElectionNamespace/LeaderElectionName, so that of several
	// instances (replicas, or both pods of a rollout) exactly one binds.
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionName      string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration

	// Policy is the placement policy, and GPUWeight and MemoryWeight the
	// weights of GPU compute and GPU memory in its score: the plugin's
	// scoringStrategy (type, and the weights of resources nvidia.com/gpu and
	// gpusched.io/gpu-memory; 0 leaves a resource out).
	Policy       string
	GPUWeight    int64
	MemoryWeight int64
	// SchedulerNames are the schedulers whose pods the extender binds: those
	// of the profiles that call it. A bind request for a pod of another
	// scheduler is refused, so nobody who reaches the API can have the
	// extender bind (and give GPUs to) a pod its scheduler never placed.
	SchedulerNames []string
	// PlacementArgsFile, when set, is a file holding GPUPlacementArgs in
	// the form a KubeSchedulerConfiguration's pluginConfig gives the
	// GPUPlacement plugin; it replaces Policy, GPUWeight and MemoryWeight,
	// so that the extender and the plugin can run from one set of args.
	PlacementArgsFile string
	// PodGroups is what the extender does with a pod of a gang (labelled
	// podgroup.LabelPodGroup) that asks for GPUs: PodGroupsRefuse or
	// PodGroupsPlace.
	PodGroups string
}

// The values of Options.PodGroups.
const (
	// PodGroupsRefuse: a gang pod fits no node, with MsgGangPod. The
	// extender places pods one at a time and cannot hold a gang together;
	// placed one by one, a gang that can never run holds GPUs for good.
	PodGroupsRefuse = "refuse"
	// PodGroupsPlace: a gang pod is placed as any other, for a scheduler
	// whose own plugin (scheduler-plugins' Coscheduling) holds gangs
	// together.
	PodGroupsPlace = "place"
)

// NewOptions returns the defaults: PairFit, as the plugin's default, and GPU
// compute alone for the resource-weighted policies; port 8888 on loopback,
// as a sidecar of the scheduler.
func NewOptions() *Options {
	return &Options{
		SchedulerNames:    []string{v1.DefaultSchedulerName},
		KubeAPIQPS:        50,
		KubeAPIBurst:      100,
		BindAddress:       "127.0.0.1:8888",
		MaxRequestBytes:   DefaultMaxRequestBytes,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		ShutdownTimeout:   10 * time.Second,
		BindSettleAfter:   DefaultBindSettleAfter,

		LeaderElectionNamespace: "kube-system",
		LeaderElectionName:      "gpusched-extender",
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		Policy:                  string(gpu.DefaultPolicy),
		GPUWeight:               gpu.DefaultWeights.GPU,
		MemoryWeight:            gpu.DefaultWeights.Memory,
		PodGroups:               PodGroupsRefuse,
	}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty: the in-cluster configuration")
	fs.StringSliceVar(&o.SchedulerNames, "scheduler-name", o.SchedulerNames, "the schedulers (spec.schedulerName) whose pods the extender binds: those of the profiles that call it; a bind of any other pod is refused")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "host:port to serve the extender API, health and metrics on")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serve HTTPS with this PEM certificate (chain); needs --tls-private-key-file")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "the PEM private key of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "require of callers of filter, prioritize, bind and preempt a client certificate signed by this PEM CA (mutual TLS); required unless --bind-address is loopback")
	fs.StringSliceVar(&o.ClientNames, "client-name", o.ClientNames, "with --client-ca-file, the client certificate names (common name or DNS name) allowed; empty: any the CA signed")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest request body accepted; larger ones get 413")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "time to read a request's headers")
	fs.DurationVar(&o.ReadTimeout, "read-timeout", o.ReadTimeout, "time to read a whole request")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", o.WriteTimeout, "time from the end of a request's headers to the end of its answer")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "on SIGTERM, how long to let requests in flight finish")
	fs.DurationVar(&o.BindSettleAfter, "bind-settle-after", o.BindSettleAfter, "when a bind's write fails without saying whether it was written, hold its GPUs until a read this long after the write ended finds the pod unbound; at least the API server's --request-timeout")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "bind only while holding the leader lease, so that of several instances exactly one binds (filter, prioritize and preempt are served by all)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-elect-resource-namespace", o.LeaderElectionNamespace, "namespace of the leader Lease")
	fs.StringVar(&o.LeaderElectionName, "leader-elect-resource-name", o.LeaderElectionName, "name of the leader Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a non-leader waits after the last renewal before taking the lease")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader retries renewing before it stops binding; less than the lease duration")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often to try to take or renew the lease")
	fs.StringVar(&o.Policy, "policy", o.Policy, fmt.Sprintf("placement policy, one of %s (docs/policies.md)", strings.Join(gpu.PolicyNames(), ", ")))
	fs.Int64Var(&o.GPUWeight, "gpu-weight", o.GPUWeight, fmt.Sprintf("weight of GPU compute in the policy's score, 0..%d", validation.MaxWeight))
	fs.Int64Var(&o.MemoryWeight, "memory-weight", o.MemoryWeight, fmt.Sprintf("weight of GPU memory in the policy's score, 0..%d", validation.MaxWeight))
	fs.StringVar(&o.PodGroups, "pod-groups", o.PodGroups, fmt.Sprintf("pods of a gang (label %s) that ask for GPUs: %q refuses them, naming gpusched's own scheduler, which places gangs whole; %q places them one by one, for a scheduler with a gang plugin of its own (Coscheduling)", podgroup.LabelPodGroup, PodGroupsRefuse, PodGroupsPlace))
	fs.StringVar(&o.PlacementArgsFile, "placement-args", o.PlacementArgsFile, "file of GPUPlacementArgs (YAML, as under the plugin's pluginConfig); replaces --policy, --gpu-weight and --memory-weight")
}

// Validate reports every invalid option, each naming its flag, the value and
// what is allowed. The policy rules are the plugin's
// (pkg/apis/config/validation): a weight of 0 leaves the resource out, as
// leaving it out of the plugin's resources does.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag string, value any, allowed string) {
		errs = append(errs, fmt.Errorf("invalid --%s %v: %s", flag, value, allowed))
	}
	if _, err := gpu.LookupPolicy(o.Policy); err != nil {
		bad("policy", fmt.Sprintf("%q", o.Policy), err.Error())
	}
	if o.PodGroups != PodGroupsRefuse && o.PodGroups != PodGroupsPlace {
		bad("pod-groups", fmt.Sprintf("%q", o.PodGroups), fmt.Sprintf("want %q or %q", PodGroupsRefuse, PodGroupsPlace))
	}
	if len(o.SchedulerNames) == 0 || slices.Contains(o.SchedulerNames, "") {
		bad("scheduler-name", fmt.Sprintf("%q", o.SchedulerNames), "want the names of the schedulers that call the extender, none empty (default "+v1.DefaultSchedulerName+")")
	}
	for flag, w := range map[string]int64{"gpu-weight": o.GPUWeight, "memory-weight": o.MemoryWeight} {
		if w < 0 || w > validation.MaxWeight {
			bad(flag, w, fmt.Sprintf("want a weight from 0 to %d", validation.MaxWeight))
		}
	}
	if o.GPUWeight <= 0 && o.MemoryWeight <= 0 {
		errs = append(errs, errors.New("invalid --gpu-weight and --memory-weight: at least one must be positive"))
	}
	if _, _, err := net.SplitHostPort(o.BindAddress); err != nil {
		bad("bind-address", fmt.Sprintf("%q", o.BindAddress), "want host:port")
	} else if o.ClientCAFile == "" && !IsLoopback(o.BindAddress) {
		bad("bind-address", fmt.Sprintf("%q", o.BindAddress), "the API binds pods and gives them GPUs: listen on loopback "+
			"(a sidecar of the scheduler) or require the scheduler's client certificate with --client-ca-file")
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("invalid --tls-cert-file and --tls-private-key-file: set both or neither"))
	}
	if o.ClientCAFile != "" && o.TLSCertFile == "" {
		errs = append(errs, errors.New("invalid --client-ca-file: client certificates need TLS: set --tls-cert-file and --tls-private-key-file too"))
	}
	if len(o.ClientNames) > 0 && o.ClientCAFile == "" {
		bad("client-name", fmt.Sprintf("%q", o.ClientNames), "names are checked in client certificates: set --client-ca-file too")
	}
	if slices.Contains(o.ClientNames, "") {
		bad("client-name", fmt.Sprintf("%q", o.ClientNames), "want non-empty names")
	}
	if o.MaxRequestBytes <= 0 {
		bad("max-request-bytes", o.MaxRequestBytes, "want a positive number of bytes")
	}
	for flag, d := range map[string]time.Duration{
		"read-header-timeout": o.ReadHeaderTimeout, "read-timeout": o.ReadTimeout,
		"write-timeout": o.WriteTimeout, "shutdown-timeout": o.ShutdownTimeout, "bind-settle-after": o.BindSettleAfter,
	} {
		if d <= 0 {
			bad(flag, d, "want a positive duration")
		}
	}
	if o.LeaderElect {
		switch {
		case o.LeaderElectionNamespace == "" || o.LeaderElectionName == "":
			errs = append(errs, errors.New("invalid --leader-elect-resource-namespace or --leader-elect-resource-name: want both non-empty"))
		case o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration.Truncate(time.Second) <= o.RenewDeadline:
			// The Lease records its duration in whole seconds, and others
			// wait that long: the fence (the renew deadline) must end first.
			errs = append(errs, fmt.Errorf("invalid --leader-elect-lease-duration %v, --leader-elect-renew-deadline %v, --leader-elect-retry-period %v: want lease duration (in whole seconds) > renew deadline > retry period > 0",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("invalid --kube-api-qps %v or --kube-api-burst %d: want positive values", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// PlacementArgs returns the validated GPUPlacement args the options
// select: the file's, or those the policy flags spell, with the plugin's
// defaults for the rest (a learned distribution of pod shapes, with the
// plugin's default half-life).
func (o *Options) PlacementArgs() (*config.GPUPlacementArgs, error) {
	if o.PlacementArgsFile != "" {
		data, err := os.ReadFile(o.PlacementArgsFile)
		if err != nil {
			return nil, fmt.Errorf("--placement-args: %w", err)
		}
		args, err := load.GPUPlacementArgsFromYAML(data)
		if err != nil {
			return nil, fmt.Errorf("--placement-args %s: %w", o.PlacementArgsFile, err)
		}
		return args, nil
	}
	var v1args configv1.GPUPlacementArgs
	configv1.SetDefaults_GPUPlacementArgs(&v1args)
	args := &config.GPUPlacementArgs{}
	configv1.Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs(&v1args, args)
	args.ScoringStrategy.Type = config.ScoringStrategyType(o.Policy)
	args.ScoringStrategy.Resources = nil
	for name, w := range map[string]int64{config.ResourceGPU: o.GPUWeight, config.ResourceGPUMemory: o.MemoryWeight} {
		if w > 0 {
			args.ScoringStrategy.Resources = append(args.ScoringStrategy.Resources, config.ResourceSpec{Name: name, Weight: w})
		}
	}
	slices.SortFunc(args.ScoringStrategy.Resources, func(a, b config.ResourceSpec) int { return strings.Compare(a.Name, b.Name) })
	return load.GPUPlacementArgs(args)
}

// NewPolicy returns the policy the options select (PlacementArgs).
func (o *Options) NewPolicy() (*gpu.Policy, error) {
	args, err := o.PlacementArgs()
	if err != nil {
		return nil, err
	}
	return args.NewPolicy()
}
