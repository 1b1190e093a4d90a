package simulator

import (
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
)

// flags are the simulate command's options.
type flags struct {
	nodes, pods, config string
	policies, seeds     string
	arrival, tieBreak   string
	jsonOut, htmlOut    string
	telemetry           string
	parallel            int
	quiet               bool
	dra                 bool
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
synthetic cluster and workload. See docs/simulator.md.`,
		Example: `  gpusched simulate --policies BestFit,Packing,GpuPacking --seeds 42..44
  gpusched simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \
      --policies BestFitCPUGPU,DotProd --seeds 42..51 --json out.json --html out.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCommand(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
		SilenceUsage: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodes, "nodes", "", "cluster: Alibaba node CSV (sn,cpu_milli,memory_mib,gpu,model) or YAML of Node objects")
	fs.StringVar(&f.pods, "pods", "", "workload: Alibaba pod CSV (full or 5-column form) or YAML of Pod objects")
	fs.StringVar(&f.config, "config", "", "a KubeSchedulerConfiguration (the scheduler's own file); default: the built-in simulation profile")
	fs.StringVar(&f.policies, "policies", "", "comma-separated policies, one profile each, from the first profile of the config; default: the config's profiles")
	fs.StringVar(&f.seeds, "seeds", "42", "seeds: N, N..M, or a comma-separated list")
	fs.StringVar(&f.arrival, "arrival", string(ArrivalFGD), "arrival process: fgd (the FGD paper's protocol) or replay (the trace's creation and deletion times)")
	fs.StringVar(&f.tieBreak, "tie-break", "", "how equally scored nodes are chosen: node-order (the FGD paper's simulator; default with --arrival fgd) or random (kube-scheduler; default with --arrival replay)")
	fs.StringVar(&f.telemetry, "telemetry", "", "recorded GPU telemetry (CSV time,node,gpu,signal,value) that the GPUTelemetry plugin replays at each pod's arrival time")
	fs.StringVar(&f.jsonOut, "json", "", "write the full report as JSON to this file")
	fs.StringVar(&f.htmlOut, "html", "", "write a self-contained HTML report with charts to this file")
	fs.IntVar(&f.parallel, "parallel", 0, "runs at once; default one per CPU")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar on stderr")
	fs.BoolVar(&f.dra, "dra", false, "the DRA path: GPUs published as DRA devices, GPU requests as ResourceClaims that DynamicResources allocates first fit, the policy ranking nodes on its predicted allocation (docs/dra.md)")
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
	return cmd
}

func runCommand(ctx context.Context, f flags, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	opts, err := optionsFromFlags(f)
	if err != nil {
		return err
	}
	var bar *progressBar
	if !f.quiet {
		bar = newProgressBar(stderr)
		opts.Progress = bar.update
	}
	start := time.Now()
	runs, err := Simulate(ctx, opts)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return err
	}
	report := NewReport(opts, runs, time.Since(start).Seconds())
	if err := report.WriteTable(stdout); err != nil {
		return err
	}
	if f.jsonOut != "" {
		if err := report.WriteJSON(f.jsonOut); err != nil {
			return err
		}
	}
	if f.htmlOut != "" {
		if err := report.WriteHTML(f.htmlOut); err != nil {
			return err
		}
	}
	return nil
}

func optionsFromFlags(f flags) (Options, error) {
	var opts Options
	arrival := Arrival(f.arrival)
	if arrival != ArrivalFGD && arrival != ArrivalReplay {
		return opts, fmt.Errorf("--arrival %q: want %s or %s", f.arrival, ArrivalFGD, ArrivalReplay)
	}
	tieBreak := TieBreak(f.tieBreak)
	if tieBreak != "" && tieBreak != TieBreakRandom && tieBreak != TieBreakNodeOrder {
		return opts, fmt.Errorf("--tie-break %q: want %s or %s", f.tieBreak, TieBreakNodeOrder, TieBreakRandom)
	}
	seeds, err := ParseSeeds(f.seeds)
	if err != nil {
		return opts, err
	}
	if (f.nodes == "") != (f.pods == "") {
		return opts, fmt.Errorf("--nodes and --pods go together: give both, or neither for the built-in synthetic cluster and workload")
	}
	var nodes []*v1.Node
	var pods []TracePod
	if f.nodes == "" {
		nodes, pods = Synthetic(SyntheticOptions{})
	} else {
		if nodes, err = LoadNodes(f.nodes); err != nil {
			return opts, err
		}
		if pods, err = LoadPods(f.pods); err != nil {
			return opts, err
		}
	}
	cfg, err := LoadConfig(f.config)
	if err != nil {
		return opts, err
	}
	var policies []string
	for p := range strings.SplitSeq(f.policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	profiles, err := ProfilesFor(cfg, policies)
	if err != nil {
		return opts, err
	}
	if f.parallel < 0 {
		return opts, fmt.Errorf("--parallel %d: want 0 (one run per CPU) or more", f.parallel)
	}
	opts = Options{Nodes: nodes, Pods: pods, Profiles: profiles, Seeds: seeds, Arrival: arrival, TieBreak: tieBreak, Parallel: f.parallel, DRA: f.dra}
	if f.telemetry != "" {
		if opts.Telemetry, err = LoadTelemetry(f.telemetry); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

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
// a line per 10% elsewhere (logs).
type progressBar struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	start    time.Time
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
	return &progressBar{w: w, tty: tty, start: time.Now(), lastTens: -1}
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
		fmt.Fprintf(b.w, "\r[%s%s] %3d%% %d/%d pods  %.0fs", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			pct, done, total, time.Since(b.start).Seconds())
		return
	}
	if tens := pct / 10; tens > b.lastTens {
		b.lastTens = tens
		fmt.Fprintf(b.w, "simulate: %3d%% (%d/%d pods, %.0fs)\n", pct, done, total, time.Since(b.start).Seconds())
	}
}

func (b *progressBar) finish() {
	if b.tty {
		fmt.Fprintln(b.w)
	}
}
