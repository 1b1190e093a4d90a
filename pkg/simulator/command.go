package simulator

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// flags are the simulate command's options.
type flags struct {
	nodes, pods, config string
	policies, seeds     string
	arrival, tieBreak   string
	jsonOut, htmlOut    string
	telemetry           string
	shares              string
	parallel            int
	quiet               bool
	dra, draFirstFit    bool
	noTimings           bool
	placements          bool
	migrations          string
	// shard, shards and out run one shard of the sweep (parseShard).
	shard  string
	shards int
	out    string
}

// NewCommand is `gpusched simulate`.
func NewCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a cluster and a workload through the scheduler's plugins and report how each policy packs GPUs",
		Long: `simulate places a workload on a cluster with the same framework, plugins and
configuration the scheduler runs, in-process, and reports GPU allocation per
policy: unallocated GPU % at arrived workload = 100% of GPU capacity (mean ± sd
over seeds), failed pods, the allocation and fragmentation curves, and the
allocation by GPU model. With no --nodes and --pods it runs a built-in
synthetic cluster and workload.

A sweep of several pod lists (--pods a.csv,b.csv) can be split into shards
run by separate processes — the pods of a Kubernetes Indexed Job with
--shards N, or anywhere with --shard I/N — each writing its runs into --out;
"gpusched simulate merge" combines them into the report one process would
write. See docs/simulator.md.`,
		Example: `  gpusched simulate --policies BestFit,Packing,GpuPacking --seeds 42..44
  gpusched simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \
      --policies BestFitCPUGPU,DotProd --seeds 42..51 --json out.json --html out.html
  JOB_COMPLETION_INDEX=3 gpusched simulate --nodes nodes.csv --pods a.csv,b.csv --seeds 42..51 --shards 8 --out results/
  gpusched simulate merge results/ --json sweep.json --html sweep.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCommand(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
		SilenceUsage: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodes, "nodes", "", "cluster: Alibaba node CSV (sn,cpu_milli,memory_mib,gpu,model) or YAML of Node objects")
	fs.StringVar(&f.pods, "pods", "", "workload: Alibaba pod CSV (full or 5-column form) or YAML of Pod objects; several, separated by commas, make a sweep with a report per workload")
	fs.StringVar(&f.config, "config", "", "a KubeSchedulerConfiguration (the scheduler's own file); default: the built-in simulation profile")
	fs.StringVar(&f.policies, "policies", "", "comma-separated policies, one profile each, from the first profile of the config; default: the config's profiles")
	fs.StringVar(&f.seeds, "seeds", "42", "seeds: N, N..M, or a comma-separated list")
	fs.StringVar(&f.arrival, "arrival", string(trace.ArrivalFGD), "arrival process: fgd (the FGD paper's protocol) or replay (the trace's creation and deletion times)")
	fs.StringVar(&f.tieBreak, "tie-break", "", "how equally scored nodes are chosen: node-order (the FGD paper's simulator; default with --arrival fgd) or random (kube-scheduler; default with --arrival replay)")
	fs.StringVar(&f.telemetry, "telemetry", "", "recorded GPU telemetry (CSV time,node,gpu,signal,value) that the GPUTelemetry plugin replays at each pod's arrival time")
	fs.StringVar(&f.jsonOut, "json", "", "write the full report as JSON to this file")
	fs.StringVar(&f.htmlOut, "html", "", "write a self-contained HTML report with charts to this file")
	fs.IntVar(&f.parallel, "parallel", 0, "runs at once; default one per CPU")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar on stderr")
	fs.StringVar(&f.shares, "shares", sharesAnnotation, "how the workload's pods ask for shares of a GPU: annotation (gpusched.io/gpu-milli annotation) or resources (the gpusched.io/gpu-milli resource, which quota counts); placements are the same either way")
	fs.BoolVar(&f.dra, "dra", false, "the DRA path: GPUs published as DRA devices, GPU requests as ResourceClaims, allocated by DynamicResources with the devices the policy chooses first (GPUDynamicResources; docs/dra.md)")
	fs.BoolVar(&f.draFirstFit, "dra-first-fit", false, "with --dra: DynamicResources' own first fit, the policy ranking nodes on its predicted allocation")
	fs.StringVar(&f.migrations, "migrations", "", "also run each policy moving pods to make room for pods that fit nowhere, once per budget: comma-separated fractions of placed pods (\"0.5%,2%\") or, with --arrival replay, moves per hour (\"30/h\"); docs/defragmentation.md")
	fs.BoolVar(&f.placements, "placements", false, "record every submitted pod's outcome (its node and GPUs, or why it was refused) in each run of the JSON report")
	fs.BoolVar(&f.noTimings, "no-timings", false, "report every wall time as 0, so that reports of the same sweep are equal byte for byte")
	fs.IntVar(&f.shards, "shards", 0, "run one of N shards of the sweep, the one "+report.ShardIndexEnv+" names (as an Indexed Job sets it); needs --out")
	fs.StringVar(&f.shard, "shard", "", "run shard I of N (I/N, 0 ≤ I < N) of the sweep; needs --out")
	fs.StringVar(&f.out, "out", "", "directory a shard writes its runs to (shard-I-of-N.json), for \"gpusched simulate merge\"")
	// The scheduler command's help prints its own flag sections, and a
	// subcommand without help of its own inherits it: print this command's.
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		_, err := fmt.Fprintf(c.OutOrStderr(), "Usage:\n  %s\n\nExamples:\n%s\n\nFlags:\n%s", c.UseLine(), c.Example, c.LocalFlags().FlagUsages())
		return err
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		fmt.Fprintf(c.OutOrStdout(), "%s\n\n", c.Long)
		c.SetOut(c.OutOrStdout())
		_ = c.Usage()
	})
	cmd.AddCommand(newMergeCommand(), newEnvCommand(), newConstrainCommand())
	return cmd
}

func runCommand(ctx context.Context, f flags, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	shard, sharded, err := parseShard(f.shard, f.shards, os.Getenv)
	if err != nil {
		return err
	}
	switch {
	case sharded && f.out == "":
		return fmt.Errorf("--shard %s needs --out DIR: the directory the shard writes its runs to", shard)
	case !sharded && f.out != "":
		return fmt.Errorf("--out %s needs --shard I/N or --shards N: a whole sweep writes its report with --json and --html", f.out)
	case sharded && (f.jsonOut != "" || f.htmlOut != ""):
		return fmt.Errorf("--shard %s writes its runs to --out only: merge the shards with \"gpusched simulate merge\" for --json and --html", shard)
	}
	opts, workloads, err := optionsFromFlags(f)
	if err != nil {
		return err
	}
	var bar *progressBar
	if !f.quiet {
		bar = newProgressBar(stderr)
	}
	if sharded {
		spec := report.SweepSpec{Cluster: syntheticName, Policies: profileNames(opts.Profiles), Seeds: opts.Seeds,
			Arrival: opts.Arrival, TieBreak: cmp.Or(opts.TieBreak, report.DefaultTieBreak(opts.Arrival))}
		if f.nodes != "" {
			spec.Cluster = report.WorkloadName(f.nodes)
		}
		for _, w := range workloads {
			spec.Workloads = append(spec.Workloads, w.name)
		}
		return runShard(ctx, opts, workloads, &spec, shard, f.out, bar, stdout)
	}
	start := time.Now()
	var reports []*report.Report
	for _, w := range workloads {
		o := opts
		if o.Workload, o.Pods, err = w.load(); err != nil {
			return err
		}
		o.Progress = bar.start(o.Workload, len(workloads) > 1)
		t0 := time.Now()
		runs, err := Simulate(ctx, o)
		bar.finish()
		if err != nil {
			return err
		}
		reports = append(reports, NewReport(o, runs, time.Since(t0).Seconds()))
	}
	sweep := report.NewSweep(reports, time.Since(start).Seconds())
	if f.noTimings {
		sweep.ClearTimings()
	}
	return writeSweep(sweep, stdout, f.jsonOut, f.htmlOut)
}

// writeSweep prints the sweep's table and writes its JSON and HTML reports
// where asked.
func writeSweep(sweep *report.Sweep, stdout io.Writer, jsonOut, htmlOut string) error {
	if err := sweep.WriteTable(stdout); err != nil {
		return err
	}
	if jsonOut != "" {
		if err := sweep.WriteJSON(jsonOut); err != nil {
			return err
		}
	}
	if htmlOut != "" {
		if err := sweep.WriteHTML(htmlOut); err != nil {
			return err
		}
	}
	return nil
}

// workload is one pod list of a sweep, loaded when its runs start.
type workload struct {
	name string
	// path is the pod list's file; "" is the built-in synthetic workload.
	path string
	// sharesAsResources asks for shares with the gpusched.io/gpu-milli
	// resource instead of the annotation (trace.SharesAsResources).
	sharesAsResources bool
}

// The values of --shares.
const (
	sharesAnnotation = "annotation"
	sharesResources  = "resources"
)

func (w workload) load() (string, []trace.Pod, error) {
	var pods []trace.Pod
	if w.path == "" {
		_, pods = trace.Synthetic(trace.SyntheticOptions{})
	} else {
		var err error
		if pods, err = trace.LoadPods(w.path); err != nil {
			return w.name, nil, err
		}
	}
	if w.sharesAsResources {
		trace.SharesAsResources(pods)
	}
	return w.name, pods, nil
}

// optionsFromFlags reads the flags into the options shared by the sweep's
// workloads (Pods and Workload are left to each workload) and the
// workloads, in order.
func optionsFromFlags(f flags) (Options, []workload, error) {
	var opts Options
	arrival := trace.Arrival(f.arrival)
	if arrival != trace.ArrivalFGD && arrival != trace.ArrivalReplay {
		return opts, nil, fmt.Errorf("--arrival %q: want %s or %s", f.arrival, trace.ArrivalFGD, trace.ArrivalReplay)
	}
	tieBreak := report.TieBreak(f.tieBreak)
	if tieBreak != "" && tieBreak != report.TieBreakRandom && tieBreak != report.TieBreakNodeOrder {
		return opts, nil, fmt.Errorf("--tie-break %q: want %s or %s", f.tieBreak, report.TieBreakNodeOrder, report.TieBreakRandom)
	}
	seeds, err := ParseSeeds(f.seeds)
	if err != nil {
		return opts, nil, err
	}
	if (f.nodes == "") != (f.pods == "") {
		return opts, nil, fmt.Errorf("--nodes and --pods go together: give both, or neither for the built-in synthetic cluster and workload")
	}
	var nodes []*v1.Node
	var workloads []workload
	switch f.shares {
	case "", sharesAnnotation, sharesResources: // "" is the default, as the flag's
	default:
		return opts, nil, fmt.Errorf("--shares %q: want %s (the gpusched.io/gpu-milli annotation) or %s (the gpusched.io/gpu-milli resource)",
			f.shares, sharesAnnotation, sharesResources)
	}
	asResources := f.shares == sharesResources
	if f.nodes == "" {
		nodes, _ = trace.Synthetic(trace.SyntheticOptions{})
		workloads = []workload{{name: syntheticName, sharesAsResources: asResources}}
	} else {
		paths, err := splitPodLists(f.pods)
		if err != nil {
			return opts, nil, err
		}
		for _, p := range paths {
			workloads = append(workloads, workload{name: report.WorkloadName(p), path: p, sharesAsResources: asResources})
		}
		if nodes, err = trace.LoadNodes(f.nodes); err != nil {
			return opts, nil, err
		}
	}
	cfg, err := LoadConfig(f.config)
	if err != nil {
		return opts, nil, err
	}
	var policies []string
	for p := range strings.SplitSeq(f.policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	profiles, err := ProfilesFor(cfg, policies)
	if err != nil {
		return opts, nil, err
	}
	if profiles, err = withMigrations(profiles, f.migrations); err != nil {
		return opts, nil, err
	}
	if f.parallel < 0 {
		return opts, nil, fmt.Errorf("--parallel %d: want 0 (one run per CPU) or more", f.parallel)
	}
	if f.draFirstFit && !f.dra {
		return opts, nil, fmt.Errorf("--dra-first-fit: applies to the DRA path only; add --dra")
	}
	opts = Options{Nodes: nodes, Profiles: profiles, Seeds: seeds, Arrival: arrival, TieBreak: tieBreak, Parallel: f.parallel, DRA: f.dra, DRAFirstFit: f.draFirstFit, RecordPlacements: f.placements}
	if f.telemetry != "" {
		if opts.Telemetry, err = trace.LoadTelemetry(f.telemetry); err != nil {
			return opts, nil, err
		}
	}
	return opts, workloads, nil
}

// syntheticName names the built-in cluster and workload in reports.
const syntheticName = "synthetic"

// ParseSeeds reads "42", "42..51" or "1,5,9".
func ParseSeeds(s string) ([]int64, error) {
	bad := fmt.Errorf("--seeds %q: want N, N..M with N ≤ M, or a comma-separated list of integers", s)
	if lo, hi, ok := strings.Cut(s, ".."); ok {
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b, err2 := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil || a > b || b-a >= 10000 {
			return nil, bad
		}
		var out []int64
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
		return out, nil
	}
	var out []int64
	for part := range strings.SplitSeq(s, ",") {
		x, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return nil, bad
		}
		out = append(out, x)
	}
	return out, nil
}

// progressBar draws the pods scheduled so far on one line of a terminal, or
// a line per 10% elsewhere (logs), for one workload at a time. A nil
// progressBar draws nothing.
type progressBar struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	label    string
	began    time.Time
	last     time.Time
	lastTens int64
}

func newProgressBar(w io.Writer) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressBar{w: w, tty: tty}
}

// start begins a workload's bar, labelled with its name when named is set,
// and returns the function that Options.Progress calls.
func (b *progressBar) start(name string, named bool) func(done, total int64) {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.began, b.lastTens, b.label = time.Now(), -1, ""
	if named {
		b.label = name + " "
	}
	return b.update
}

func (b *progressBar) update(done, total int64) {
	if total <= 0 {
		return
	}
	done = min(done, total)
	b.mu.Lock()
	defer b.mu.Unlock()
	pct := 100 * done / total
	if b.tty {
		if time.Since(b.last) < 100*time.Millisecond && done < total {
			return
		}
		b.last = time.Now()
		const width = 40
		filled := int(width * done / total)
		fmt.Fprintf(b.w, "\r%s[%s%s] %3d%% %d/%d pods  %.0fs", b.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			pct, done, total, time.Since(b.began).Seconds())
		return
	}
	if tens := pct / 10; tens > b.lastTens {
		b.lastTens = tens
		fmt.Fprintf(b.w, "simulate: %s%3d%% (%d/%d pods, %.0fs)\n", b.label, pct, done, total, time.Since(b.began).Seconds())
	}
}

func (b *progressBar) finish() {
	if b != nil && b.tty {
		fmt.Fprintln(b.w)
	}
}

// envFlags are the environment command's options.
type envFlags struct {
	nodes, pods, config, policy string
	arrival, tieBreak, reward   string
	noScreen, timings           bool
	scoreColumns                []string
}

// newEnvCommand is `gpusched simulate env`.
func newEnvCommand() *cobra.Command {
	var f envFlags
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Serve the simulator as a reinforcement-learning environment over stdin and stdout",
		Long: `env steps the simulator one pending pod at a time for an external policy, with
Gymnasium's conventions: it reads EnvRequest messages (reset with a seed, step
with a node index) on stdin and writes an EnvReply for each on stdout, each
message preceded by its length as a 4-byte little-endian unsigned integer
(proto/gpusched/policy/v1alpha1/policy.proto). An episode is the run that
simulate makes of the policy with the seed; each observation is the pod, one
feature row per node, the mask of the nodes every Filter plugin accepts, and
the node the policy itself would choose. The Python package in python/
(gpusched_policy.env.SimEnv) speaks it. Logs go to stderr.`,
		Example: `  gpusched simulate env --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv --reward fragmentation`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			env, err := envFromFlags(f)
			if err != nil {
				return err
			}
			defer env.Close()
			err = ServeEnv(ctx, env, cmd.InOrStdin(), cmd.OutOrStdout())
			if f.timings {
				fmt.Fprintf(cmd.ErrOrStderr(), "simulate env: %s\n", env.Timings())
			}
			return err
		},
		SilenceUsage: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodes, "nodes", "", "cluster: Alibaba node CSV or YAML of Node objects; default: the built-in synthetic cluster")
	fs.StringVar(&f.pods, "pods", "", "workload: Alibaba pod CSV or YAML of Pod objects; default: the built-in synthetic workload")
	fs.StringVar(&f.config, "config", "", "a KubeSchedulerConfiguration; default: the built-in simulation profile")
	fs.StringVar(&f.policy, "policy", "", "the policy whose profile runs the episodes, from the config's first profile; default: the config's first profile as it is")
	fs.StringVar(&f.arrival, "arrival", string(trace.ArrivalFGD), "arrival process: fgd or replay (as simulate's)")
	fs.StringVar(&f.tieBreak, "tie-break", "", "tie-break among equally scored nodes for builtin_action: node-order or random (as simulate's)")
	fs.StringVar(&f.reward, "reward", string(RewardFragmentation), "step reward: fragmentation (−change of fragmented GPU, % of capacity), allocation (GPU % allocated) or unallocated (−unallocated % at 100% arrived, on the last step)")
	fs.BoolVar(&f.timings, "timings", false, "print where the time went, per step, on stderr at the end")
	fs.BoolVar(&f.noScreen, "no-screen", false, "run the Filter plugins on every node, without the simulator's GPU screen (same results, slower)")
	fs.StringSliceVar(&f.scoreColumns, "score-columns", nil, "policies whose scores the observation adds as columns <policy>_score (e.g. FragFit,FGD): "+strings.Join(gpu.PolicyNames(), ", "))
	return cmd
}

// envFromFlags builds the environment the flags describe.
func envFromFlags(f envFlags) (*Env, error) {
	sim, workloads, err := optionsFromFlags(flags{nodes: f.nodes, pods: f.pods, config: f.config, policies: f.policy,
		seeds: "42", arrival: f.arrival, tieBreak: f.tieBreak})
	if err != nil {
		return nil, err
	}
	if len(workloads) != 1 {
		return nil, fmt.Errorf("--pods %s: an environment runs one pod list, not %d", f.pods, len(workloads))
	}
	_, pods, err := workloads[0].load()
	if err != nil {
		return nil, err
	}
	return NewEnv(EnvOptions{Nodes: sim.Nodes, Pods: pods, Profile: sim.Profiles[0], Arrival: sim.Arrival,
		TieBreak: sim.TieBreak, NoScreen: f.noScreen, Reward: Reward(f.reward), ScoreColumns: policyTypes(f.scoreColumns)})
}

// policyTypes is names as policy types (NewEnv checks them).
func policyTypes(names []string) []gpu.PolicyType {
	out := make([]gpu.PolicyType, len(names))
	for i, n := range names {
		out[i] = gpu.PolicyType(strings.TrimSpace(n))
	}
	return out
}
