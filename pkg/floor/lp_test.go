package floor

import (
	"math"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
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
