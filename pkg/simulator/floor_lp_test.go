package simulator

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
	"github.com/gpusched/gpusched/pkg/trace"
)

func shares(milli ...int64) []gpu.Demand {
	var out []gpu.Demand
	for _, m := range milli {
		out = append(out, gpu.Demand{Count: 1, Milli: m})
	}
	return out
}

// TestLPPackingBound: the configuration LP's bound on small workloads whose
// best placement is known, and its certificate's arithmetic.
func TestLPPackingBound(t *testing.T) {
	whole := func(n int) gpu.Demand { return gpu.Demand{Count: n, Milli: gpu.MilliPerGPU} }
	tests := []struct {
		name    string
		demands []gpu.Demand
		gpus    int64
		want    float64 // the most any placement allocates, and the bound
	}{
		// Two 600s never share a GPU: 2 × 600.
		{"large shares alone", shares(600, 600, 600), 2, 1200},
		// 500 + 500 fill a GPU; the 300 has no room.
		{"a perfect pair", shares(500, 500, 300), 1, 1000},
		// 400 + 400 on one GPU, 400 on the other: 1200 of 2000.
		{"three 400s", shares(400, 400, 400), 2, 1200},
		// Whole GPUs fill their GPUs; the 810 takes the third, whose 190
		// only the 160 can use: 2000 + 810 + 160.
		{"whole GPUs and shares", append([]gpu.Demand{whole(2)}, shares(810, 160, 810)...), 3, 2970},
		// More arrives than fits: 4 GPUs hold 4000 at most.
		{"more than capacity", []gpu.Demand{whole(3), whole(2)}, 4, 4000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, cert, err := lpPackingBound(tt.demands, oneModel(tt.gpus))
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(cert.AllocatedMilli-tt.want) > 1e-3 {
				t.Errorf("bound %v milli-GPU, want %v (certificate %+v)", cert.AllocatedMilli, tt.want, cert)
			}
			// The certificate proves what it says: every pattern weighs at
			// most PerGPU, and the bound is its arithmetic.
			sizes, counts := make([]int64, len(items.Kinds)), items.Counts()
			for i, k := range items.Kinds {
				sizes[i] = k.Size
			}
			w := cert.Weights
			bound := cert.PerGPU[0] * float64(tt.gpus)
			var total float64
			for i, s := range sizes {
				if w[i] < 0 || w[i] > float64(s) {
					t.Errorf("weight %v for size %d: want 0..%d", w[i], s, s)
				}
				bound += float64(counts[i]) * (float64(s) - w[i])
				total += float64(counts[i] * s)
			}
			if heaviest, _ := packing.HeaviestPattern(sizes, counts, w); heaviest > cert.PerGPU[0]+1e-9 {
				t.Errorf("a GPU holds %v of weight, more than the certificate's %v", heaviest, cert.PerGPU[0])
			}
			if want := math.Min(bound, total); math.Abs(cert.AllocatedMilli-want) > 1e-3 {
				t.Errorf("bound %v, but the certificate's arithmetic gives %v", cert.AllocatedMilli, want)
			}
		})
	}
}

// TestLPPackingBoundWithModels: pods limited to GPU models, on a cluster
// of two models. Each want is the most any placement allocates.
func TestLPPackingBoundWithModels(t *testing.T) {
	on := func(d gpu.Demand, models ...string) gpu.Demand { d.Models = models; return d }
	whole := gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	cluster := gpu.ModelGPUs{{Model: "A100", GPUs: 2}, {Model: "T4", GPUs: 2}}
	tests := []struct {
		name    string
		demands []gpu.Demand
		want    float64
		classes int
	}{
		// Three GPUs asked for on T4, which has two, and one of any model:
		// 2 on T4, 1 on an A100, the other A100 idle: 3000. Without the
		// models 4000: the pod that cannot fit raises the bound by exactly
		// its GPU.
		{"a model with too few GPUs", []gpu.Demand{on(whole, "T4"), on(whole, "t4"), on(whole, "T4"), whole}, 3000, 2},
		// Two 600s on T4 and two 400s of any model: each 600 shares its
		// T4 with a 400: 2000. The A100s stay idle.
		{"shares paired on their model", []gpu.Demand{on(share(600), "T4"), on(share(600), "T4"), share(400), share(400)}, 2000, 2},
		// Pods that may use every model of the cluster are not limited.
		{"every model allowed", []gpu.Demand{on(whole, "T4", "A100"), whole, whole, whole, whole}, 4000, 1},
		// A model the cluster lacks: the pod cannot be placed.
		{"a model the cluster lacks", []gpu.Demand{on(whole, "H100"), whole}, 1000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, cert, err := lpPackingBound(tt.demands, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(cert.AllocatedMilli-tt.want) > 1e-3 {
				t.Errorf("bound %v milli-GPU, want %v (kinds %v, certificate %+v)", cert.AllocatedMilli, tt.want, items.Labels, cert)
			}
			if len(items.ClassGPUs) != tt.classes {
				t.Errorf("%d classes of GPUs (%v), want %d", len(items.ClassGPUs), items.ClassModels, tt.classes)
			}
		})
	}
	// A pod of a model the cluster lacks is limited, and says so.
	items, _, _ := lpPackingBound([]gpu.Demand{on(whole, "H100"), whole}, cluster)
	if !items.ModelsCounted() || !slices.Contains(items.Labels, "1000 on no model of the cluster") {
		t.Errorf("kinds %q (models counted: %v), want one limited to no model of the cluster", items.Labels, items.ModelsCounted())
	}
}

// TestLPBoundOnTheTrace: on the Alibaba default trace the LP's certificate
// is at least as strong as the hand-made one (weights 810 for 810-milli
// shares and whole GPUs, 540 for 550–650, 405 for 460–480, 270 for
// 320–440, 202.5 for 230–290, 67.5 for 220, 0 for ≤ 160: no GPU holds
// more than 810); the online floor is above it; and FragFit, which never
// refuses a pod that fits, goes below neither.
func TestLPBoundOnTheTrace(t *testing.T) {
	opts, capacity, floor := seed42Floor(t, "openb_pod_list_default.csv")
	var arrived []gpu.Demand
	var total int64
	for _, p := range trace.FGDSequence(opts.Pods, 42, capacity) {
		d, err := gpu.DemandFromPod(p.Pod)
		if err != nil || d.TotalMilli() == 0 {
			continue
		}
		if total+d.TotalMilli() > capacity {
			break
		}
		total += d.TotalMilli()
		arrived = append(arrived, d)
	}
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
	items := gpu.NewModelItems(clusterModelGPUs(opts.Nodes), arrived, nil)
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
	if got := floor.AnyPlacementPct; got < handMadePct-0.01 {
		t.Errorf("LP bound %.2f%%, below the hand-made certificate's %.2f%%", got, handMadePct)
	}

	runs := runAboveFloors(t, opts, "FragFit", floor)
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
	if f := floor; f.PlaceEveryFitPct < f.AnyPlacementPct+0.3 {
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
	if b := workloadFloors(blind, capacity)[0]; b.ModelsCounted || f.AnyPlacementPct < b.AnyPlacementPct-0.005 {
		t.Errorf("bound with models %.2f%%, without %.2f%% (models counted: %v)", f.AnyPlacementPct, b.AnyPlacementPct, b.ModelsCounted)
	}
	runAboveFloors(t, opts, "PairFit", f)
}

// seed42Floor loads a pod list of the trace on its GPU nodes, seed 42
// alone, and computes that seed's floor; capacity is the cluster's
// milli-GPU.
func seed42Floor(t *testing.T, podList string) (opts Options, capacity int64, floor Floor) {
	t.Helper()
	opts, _ = loadTrace(t, podList)
	opts.Seeds = []int64{42}
	capacity = trace.CapacityMilli(opts.Nodes)
	floors := workloadFloors(opts, capacity)
	if len(floors) != 1 {
		t.Fatalf("%d floors, want 1", len(floors))
	}
	return opts, capacity, floors[0]
}

// runAboveFloors runs policy on opts' one seed and fails the test if it
// leaves less unallocated than either bound of the seed's floor.
func runAboveFloors(t *testing.T, opts Options, policy string, f Floor) []Run {
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
