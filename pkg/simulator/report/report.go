package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/floor"
	"github.com/gpusched/gpusched/pkg/trace"
)

// Stat is a mean and sample standard deviation over seeds.
type Stat struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
}

// Summary is one policy's results over its seeds.
type Summary struct {
	Policy              string  `json:"policy"`
	UnallocatedPctAt100 *Stat   `json:"unallocated_pct_at_100"`
	Seeds               int     `json:"seeds"`
	FailedPods          Stat    `json:"failed_pods"`
	WallSeconds         Stat    `json:"wall_seconds"`
	Curve               []Point `json:"curve"`
	// Migrations summarizes the runs' migrations; nil for a profile that
	// moves no pod.
	Migrations *MigrationSummary `json:"migrations,omitempty"`
}

// MigrationSummary is a profile's migrations over its seeds.
type MigrationSummary struct {
	Budget string `json:"budget"`
	// MovedPct is pods moved per 100 placed, MovesPerGPU pods moved per GPU
	// placed by the plans.
	MovedPct    Stat `json:"moved_pct"`
	MovesPerGPU Stat `json:"moves_per_gpu"`
}

// Report is everything a simulation of one workload measured.
type Report struct {
	// Workload names the pod list (Options.Workload).
	Workload string        `json:"workload,omitempty"`
	Arrival  trace.Arrival `json:"arrival"`
	TieBreak TieBreak      `json:"tie_break"`
	Nodes    int           `json:"nodes"`
	GPUs     int64         `json:"gpus"`
	Pods     int           `json:"pods"`
	Summary  []Summary     `json:"summary"`
	// Floor is the workload's floors (see floor.Floor) over the seeds; nil for
	// replay arrival.
	Floor       *FloorSummary `json:"floor,omitempty"`
	Runs        []Run         `json:"runs"`
	WallSeconds float64       `json:"wall_seconds"`
}

// Workload is what a report says of the simulation it summarizes: the
// pod list's name, the cluster, the pods and how they arrived.
type Workload struct {
	Name    string
	Arrival trace.Arrival
	// TieBreak is how the runs chose among equally scored nodes; "" is
	// the arrival mode's default (DefaultTieBreak).
	TieBreak TieBreak
	Nodes    []*v1.Node
	Pods     []trace.Pod
}

// New summarizes runs per policy, in the order of policies, with the
// floors of the seeds (none under replay arrival) and the wall time.
func New(w Workload, policies []string, runs []Run, floors []floor.Floor, wall float64) *Report {
	r := Head(w)
	r.fill(policies, runs, floors)
	r.WallSeconds = wall
	return r
}

// Head is the part of a report that describes the cluster and the
// workload rather than the runs.
func Head(w Workload) *Report {
	return &Report{Workload: w.Name, Arrival: w.Arrival, TieBreak: cmp.Or(w.TieBreak, DefaultTieBreak(w.Arrival)),
		Nodes: len(w.Nodes), GPUs: trace.CapacityMilli(w.Nodes) / 1000, Pods: len(w.Pods)}
}

// fill sets the runs, one summary per policy in the order given, and the
// floor summary of the seeds' floors. A sweep merged from shards fills its
// reports here too, so they equal the reports of one process.
func (r *Report) fill(policies []string, runs []Run, floors []floor.Floor) {
	r.Runs = runs
	for _, p := range policies {
		var mine []Run
		for _, run := range runs {
			if run.Policy == p {
				mine = append(mine, run)
			}
		}
		r.Summary = append(r.Summary, summarize(p, mine))
	}
	if len(floors) > 0 {
		var anyPlacement, everyFit, large, bfd []float64
		for _, f := range floors {
			anyPlacement, everyFit = append(anyPlacement, f.AnyPlacementPct), append(everyFit, f.PlaceEveryFitPct)
			large, bfd = append(large, f.LargeSharesPct), append(bfd, f.OfflineBFDPct)
		}
		r.Floor = &FloorSummary{AnyPlacementPct: stat(anyPlacement), PlaceEveryFitPct: stat(everyFit),
			LargeSharesPct: stat(large), OfflineBFDPct: stat(bfd), Seeds: floors}
		for _, f := range floors {
			r.Floor.ModelsCounted = r.Floor.ModelsCounted || f.ModelsCounted
		}
	}
}

// ClearTimings zeroes every wall and CPU time in the report, so that two
// reports of the same sweep compare byte for byte (--no-timings).
func (r *Report) ClearTimings() {
	r.WallSeconds = 0
	for i := range r.Summary {
		r.Summary[i].WallSeconds = Stat{}
	}
	for i := range r.Runs {
		r.Runs[i].WallSeconds, r.Runs[i].SchedulingSeconds, r.Runs[i].MetricsSeconds = 0, 0, 0
	}
}

// FloorSummary is the workload's floor.Floor over the seeds.
type FloorSummary struct {
	AnyPlacementPct  Stat `json:"any_placement_pct"`
	PlaceEveryFitPct Stat `json:"place_every_fit_pct"`
	LargeSharesPct   Stat `json:"large_shares_pct"`
	OfflineBFDPct    Stat `json:"offline_bfd_pct"`
	// ModelsCounted is set when the LP counts GPU models on some seed
	// (floor.Floor.ModelsCounted): the two bounds then hold pods to their models.
	ModelsCounted bool          `json:"models_counted,omitempty"`
	Seeds         []floor.Floor `json:"seeds"`
}

func summarize(policy string, runs []Run) Summary {
	s := Summary{Policy: policy, Seeds: len(runs)}
	var unalloc, failed, wall, moved, perGPU []float64
	for _, run := range runs {
		if m := run.Migrations; m != nil {
			if s.Migrations == nil {
				s.Migrations = &MigrationSummary{Budget: m.Budget}
			}
			moved, perGPU = append(moved, m.MovedPct), append(perGPU, m.MovesPerGPU)
		}
		if run.UnallocatedPctAt100 != nil {
			unalloc = append(unalloc, *run.UnallocatedPctAt100)
		}
		failed = append(failed, float64(run.Failed))
		wall = append(wall, run.WallSeconds)
	}
	if len(unalloc) == len(runs) && len(runs) > 0 {
		st := stat(unalloc)
		s.UnallocatedPctAt100 = &st
	}
	s.FailedPods, s.WallSeconds = stat(failed), stat(wall)
	if s.Migrations != nil {
		s.Migrations.MovedPct, s.Migrations.MovesPerGPU = stat(moved), stat(perGPU)
	}
	s.Curve = meanCurve(runs)
	return s
}

// stat is the mean and the sample standard deviation (n − 1), 0 for one value.
func stat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	sd := 0.0
	if len(xs) > 1 {
		sd = math.Sqrt(sq / float64(len(xs)-1))
	}
	return Stat{Mean: Round2(mean), SD: Round2(sd)}
}

// meanCurve averages the runs' curves bucket by bucket.
func meanCurve(runs []Run) []Point {
	type acc struct {
		alloc, frag float64
		n, events   int
	}
	byBucket := map[int]*acc{}
	maxK := -1
	for _, run := range runs {
		for _, p := range run.Curve {
			a := byBucket[p.ArrivedPct]
			if a == nil {
				a = &acc{}
				byBucket[p.ArrivedPct] = a
			}
			a.alloc += p.AllocatedPct
			a.frag += p.FragmentedPct
			a.n++
			a.events += p.Events
			maxK = max(maxK, p.ArrivedPct)
		}
	}
	var out []Point
	for k := 0; k <= maxK; k++ {
		if a := byBucket[k]; a != nil {
			out = append(out, Point{ArrivedPct: k, AllocatedPct: Round2(a.alloc / float64(a.n)),
				FragmentedPct: Round2(a.frag / float64(a.n)), Events: a.events})
		}
	}
	return out
}

// WriteTable prints the report's header, one line per policy, the floor and
// the total wall time.
func (r *Report) WriteTable(w io.Writer) error {
	if err := r.writeBody(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\ntotal wall time %.1f s\n", r.WallSeconds)
	return err
}

// writeBody is the table without the total wall time.
func (r *Report) writeBody(w io.Writer) error {
	if r.Workload != "" {
		fmt.Fprintf(w, "%s: ", r.Workload)
	}
	fmt.Fprintf(w, "%d nodes, %d GPUs, %d pods, arrival %s, tie-break %s\n\n", r.Nodes, r.GPUs, r.Pods, r.Arrival, r.TieBreak)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	moves := slices.ContainsFunc(r.Summary, func(s Summary) bool { return s.Migrations != nil })
	header := "POLICY\tUNALLOCATED GPU % @ ARRIVED 100%\tFAILED PODS\tSEEDS\tWALL s/RUN"
	if moves {
		header += "\tMOVED % OF PLACED\tMOVES PER GPU PLACED"
	}
	fmt.Fprintln(tw, header)
	for _, s := range r.Summary {
		unalloc := "n/a (workload below capacity)"
		if s.UnallocatedPctAt100 != nil {
			unalloc = fmt.Sprintf("%.2f ± %.2f", s.UnallocatedPctAt100.Mean, s.UnallocatedPctAt100.SD)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f ± %.0f\t%d\t%.1f", s.Policy, unalloc, s.FailedPods.Mean, s.FailedPods.SD, s.Seeds, s.WallSeconds.Mean)
		switch m := s.Migrations; {
		case m != nil:
			fmt.Fprintf(tw, "\t%.2f ± %.2f\t%.2f ± %.2f", m.MovedPct.Mean, m.MovedPct.SD, m.MovesPerGPU.Mean, m.MovesPerGPU.SD)
		case moves:
			fmt.Fprint(tw, "\t-\t-")
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := r.Floor; f != nil {
		lp := "LP over per-GPU packings"
		if f.ModelsCounted {
			lp += ", each pod on its GPU models"
		}
		_, err := fmt.Fprintf(w, "\nfloors of the workload (unallocated GPU %% @ arrived 100%%; docs/simulator.md#floors):\n"+
			"  %.2f ± %.2f  no placement goes below: a bound for every placement, online or offline (%s)\n"+
			"  %.2f ± %.2f  no online placement that never refuses a pod that fits goes below (a bound for those, as kube-scheduler places)\n"+
			"  %.2f ± %.2f  no placement that places every share above 500 milli-GPU goes below (a bound for those placements)\n"+
			"  %.2f ± %.2f  offline best-fit-decreasing leaves: a heuristic packing, each pod on its GPU models, ignoring CPU, memory and nodes; not a bound\n",
			f.AnyPlacementPct.Mean, f.AnyPlacementPct.SD, lp, f.PlaceEveryFitPct.Mean, f.PlaceEveryFitPct.SD,
			f.LargeSharesPct.Mean, f.LargeSharesPct.SD, f.OfflineBFDPct.Mean, f.OfflineBFDPct.SD)
		return err
	}
	return nil
}

// topReasons is the most frequent failure messages of a run, for the report.
func topReasons(reasons map[string]int, n int) []string {
	type kv struct {
		msg   string
		count int
	}
	var all []kv
	for m, c := range reasons {
		all = append(all, kv{m, c})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.msg, b.msg)) })
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%d× %s", all[i].count, strings.TrimSpace(all[i].msg)))
	}
	return out
}
