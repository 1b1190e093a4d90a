package simulator

import (
	"context"
	"math"
	"testing"

	"github.com/gpusched/gpusched/pkg/floor"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestLPBoundOnTheTrace: on the Alibaba default trace the LP's certificate
// is at least as strong as the hand-made one (weights 810 for 810-milli
// shares and whole GPUs, 540 for 550–650, 405 for 460–480, 270 for
// 320–440, 202.5 for 230–290, 67.5 for 220, 0 for ≤ 160: no GPU holds
// more than 810); the online floor is above it; and FragFit, which never
// refuses a pod that fits, goes below neither.
func TestLPBoundOnTheTrace(t *testing.T) {
	opts, capacity, seedFloor := seed42Floor(t, "openb_pod_list_default.csv")
	arrived := floor.ArrivedDemands(opts.Pods, 42, capacity)
	handMade := func(s int64) float64 {
		switch {
		case s >= 810:
			return 810
		case s >= 550:
			return 540
		case s >= 460:
			return 405
		case s >= 320:
			return 270
		case s >= 230:
			return 202.5
		case s == 220:
			return 67.5
		}
		return 0
	}
	items := gpu.NewModelItems(floor.ModelGPUsOf(opts.Nodes), arrived, nil)
	if items.ModelsCounted() {
		t.Fatalf("the default trace limits no pod to models, yet the LP has %d classes", len(items.ClassGPUs))
	}
	sizes, counts := make([]int64, len(items.Kinds)), items.Counts()
	for i, k := range items.Kinds {
		sizes[i] = k.Size
	}
	w := make([]float64, len(sizes))
	bound := 810 * float64(capacity/gpu.MilliPerGPU)
	for i, s := range sizes {
		w[i] = handMade(s)
		bound += float64(counts[i]) * (float64(s) - w[i])
	}
	if heaviest, _ := packing.HeaviestPattern(sizes, counts, w); heaviest > 810 {
		t.Fatalf("the hand-made certificate is not one: a GPU holds %v", heaviest)
	}
	handMadePct := 100 * (float64(capacity) - bound) / float64(capacity)
	if got := seedFloor.AnyPlacementPct; got < handMadePct-0.01 {
		t.Errorf("LP bound %.2f%%, below the hand-made certificate's %.2f%%", got, handMadePct)
	}

	runs := runAboveFloors(t, opts, "FragFit", seedFloor)
	// Where the unallocated capacity sits adds up to it (the snapshot is
	// taken just before the pod that crosses 100% arrived, the curve's
	// point interpolated at it).
	var stranded int64
	for _, m := range runs[0].StrandedAt100 {
		stranded += m
	}
	if pct := 100 * float64(stranded) / float64(capacity); math.Abs(pct-*runs[0].UnallocatedPctAt100) > 0.1 {
		t.Errorf("stranded capacity %.2f%% (%v), unallocated %.2f%%", pct, runs[0].StrandedAt100, *runs[0].UnallocatedPctAt100)
	}
	if runs[0].StrandedAt100["810"] == 0 {
		t.Errorf("no capacity stranded beside 810-milli shares: %v", runs[0].StrandedAt100)
	}
	// The online floor is the tighter of the two: FragFit never refuses a
	// pod that fits, and about half a point of what it leaves is forced on
	// any such policy by what arrives before the cluster fills.
	if f := seedFloor; f.PlaceEveryFitPct < f.AnyPlacementPct+0.3 {
		t.Errorf("the online floor %.2f%% is not above the bound for any placement %.2f%%", f.PlaceEveryFitPct, f.AnyPlacementPct)
	}
}

// TestModelFloorsOnTheTrace: on the trace's list with a fifth of the GPU
// pods limited to models, the floors count the models (several classes),
// the bound with models is at least the bound without them, and PairFit,
// which never refuses a pod that fits, goes below neither bound.
func TestModelFloorsOnTheTrace(t *testing.T) {
	opts, capacity, f := seed42Floor(t, "openb_pod_list_gpuspec20.csv")
	if !f.ModelsCounted || len(f.LPClasses) < 2 {
		t.Fatalf("the floors do not count the models: %d classes", len(f.LPClasses))
	}
	var gpus int64
	for _, c := range f.LPClasses {
		gpus += c.GPUs
	}
	if gpus*gpu.MilliPerGPU != capacity {
		t.Errorf("the classes hold %d GPUs, the cluster %d", gpus, capacity/gpu.MilliPerGPU)
	}
	// The same pods without their models: the LP can only allocate more.
	blind := opts
	blind.Pods = nil
	for _, p := range opts.Pods {
		q := p
		q.Pod = p.Pod.DeepCopy()
		delete(q.Pod.Annotations, gpu.AnnotationModels)
		blind.Pods = append(blind.Pods, q)
	}
	if b := workloadFloors(blind)[0]; b.ModelsCounted || f.AnyPlacementPct < b.AnyPlacementPct-0.005 {
		t.Errorf("bound with models %.2f%%, without %.2f%% (models counted: %v)", f.AnyPlacementPct, b.AnyPlacementPct, b.ModelsCounted)
	}
	runAboveFloors(t, opts, "PairFit", f)
}

// seed42Floor loads a pod list of the trace on its GPU nodes, seed 42
// alone, and computes that seed's floor; capacity is the cluster's
// milli-GPU.
func seed42Floor(t *testing.T, podList string) (opts Options, capacity int64, f floor.Floor) {
	t.Helper()
	opts, _ = loadTrace(t, podList)
	opts.Seeds = []int64{42}
	capacity = trace.CapacityMilli(opts.Nodes)
	floors := workloadFloors(opts)
	if len(floors) != 1 {
		t.Fatalf("%d floors, want 1", len(floors))
	}
	return opts, capacity, floors[0]
}

// runAboveFloors runs policy on opts' one seed and fails the test if it
// leaves less unallocated than either bound of the seed's floor.
func runAboveFloors(t *testing.T, opts Options, policy string, f floor.Floor) []report.Run {
	t.Helper()
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Profiles, err = ProfilesFor(cfg, []string{policy}); err != nil {
		t.Fatal(err)
	}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := *runs[0].UnallocatedPctAt100; got < f.AnyPlacementPct || got < f.PlaceEveryFitPct {
		t.Errorf("%s left %.2f%% unallocated, below the bounds %.2f%% and %.2f%%", policy, got, f.AnyPlacementPct, f.PlaceEveryFitPct)
	}
	return runs
}

// TestNoFloorsUnderReplay: the report has floors under the FGD arrival
// process only; under replay pods leave, which voids every measure.
func TestNoFloorsUnderReplay(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{})
	opts := Options{Nodes: nodes, Pods: pods, Seeds: []int64{1, 2}, Arrival: trace.ArrivalFGD}
	if floors := workloadFloors(opts); len(floors) != 2 {
		t.Fatalf("FGD arrival: %d floors, want one per seed", len(floors))
	}
	opts.Arrival = trace.ArrivalReplay
	if floors := workloadFloors(opts); floors != nil {
		t.Errorf("replay arrival: floors %+v, want none (departures void every measure)", floors)
	}
}
