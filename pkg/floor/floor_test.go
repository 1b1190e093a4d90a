package floor

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/trace"
)

func share(milli int64) gpu.Demand { return gpu.Demand{Count: 1, Milli: milli} }
func whole(count int) gpu.Demand   { return gpu.Demand{Count: count, Milli: gpu.MilliPerGPU} }
func repeat(d gpu.Demand, n int) []gpu.Demand {
	out := make([]gpu.Demand, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestLargeShareBound(t *testing.T) {
	tests := []struct {
		name    string
		demands []gpu.Demand
		want    int64
	}{
		{
			name:    "no share above 500: nothing forced",
			demands: append(repeat(share(470), 3), whole(2)),
			want:    0,
		},
		{
			// t = 190: 10 × (1000 − 810) − 3 × 160 = 1900 − 480 = 1420.
			name:    "810s and the 160s that fit beside them",
			demands: append(repeat(share(810), 10), repeat(share(160), 3)...),
			want:    1420,
		},
		{
			// t = 190: 4 × 190 − 0 = 760 (the 350 fits no 190 gap);
			// t = 350: 4 × 190 + 350 − 350 = 760 (the 350 fills the 650's gap);
			// best: 760.
			name:    "a share that fits a larger gap only",
			demands: append(append(repeat(share(810), 4), share(650)), share(350)),
			want:    760,
		},
		{
			// t = 100: 2 × 100 − 50 = 150; t = 300: 2 × 100 + 2 × 300 − 50 = 750;
			// best: 750.
			name:    "the widest gap wins",
			demands: []gpu.Demand{share(900), share(900), share(700), share(700), share(50)},
			want:    750,
		},
		{
			// Whole GPUs fill no gap: t = 190: 2 × 190 = 380.
			name:    "whole GPUs do not count as fill",
			demands: []gpu.Demand{share(810), share(810), whole(1), whole(8)},
			want:    380,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := largeShareBound(tt.demands); got != tt.want {
				t.Errorf("largeShareBound = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOfflineBestFitDecreasing(t *testing.T) {
	tests := []struct {
		name    string
		demands []gpu.Demand
		gpus    int64
		want    int64
	}{
		{
			// 3 whole GPUs, then 650 on GPU 4, 350 beside it, 320 on GPU 5:
			// 3000 + 650 + 350 + 320 = 4320.
			name:    "shares pair up on the tightest GPU",
			demands: []gpu.Demand{share(320), whole(3), share(650), share(350)},
			gpus:    5,
			want:    4320,
		},
		{
			// The 8-GPU pod does not fit in 4 GPUs and is left out; then
			// 2 whole, 810 and 470 on their own GPUs, 160 beside the 810
			// (190 free, tighter than 530): 2000 + 810 + 470 + 160 = 3440.
			name:    "what does not fit is left out",
			demands: []gpu.Demand{whole(8), whole(2), share(810), share(470), share(160)},
			gpus:    4,
			want:    3440,
		},
		{
			// One GPU: 810 first; 470 fits nowhere; 190 fills it: 1000.
			name:    "largest first, the rest where it fits",
			demands: []gpu.Demand{share(470), share(190), share(810)},
			gpus:    1,
			want:    1000,
		},
	}
	// With models: an A10 and a T4. The 600 limited to the A10 goes first
	// and takes it; the whole GPU of any model then takes the T4, and the
	// 400 of any model fits beside the 600: 600 + 1000 + 400 = 2000. Placed
	// in arrival order, the whole GPU would take the A10 (the first of two
	// idle models) and leave the 600 out: 1400.
	on := func(d gpu.Demand, models ...string) gpu.Demand { d.Models = models; return d }
	if got := offlineBestFitDecreasing([]gpu.Demand{whole(1), share(400), on(share(600), "A10")}, gpu.ModelGPUs{{Model: "A10", GPUs: 1}, {Model: "T4", GPUs: 1}}); got != 2000 {
		t.Errorf("offlineBestFitDecreasing with models = %d, want 2000", got)
	}
	cluster := gpu.ModelGPUs{{Model: "A100", GPUs: 2}, {Model: "T4", GPUs: 1}}
	// A pod whose models have too few idle GPUs is left out: two GPUs on
	// T4, which has one; the whole GPU then takes an A100: 1000.
	if got := offlineBestFitDecreasing([]gpu.Demand{on(whole(2), "T4"), whole(1)}, cluster); got != 1000 {
		t.Errorf("offlineBestFitDecreasing with a model too small = %d, want 1000", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := offlineBestFitDecreasing(tt.demands, oneModel(tt.gpus)); got != tt.want {
				t.Errorf("offlineBestFitDecreasing = %d, want %d", got, tt.want)
			}
		})
	}
}

// On the synthetic workload every measure exists for every seed, and the
// bounds are no more than what best-fit-decreasing leaves: BFD is a
// placement of the LP's relaxation (GPUs only), and it places every share
// above 500 first, so both bounds hold for it.
func TestWorkloadFloors(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{})
	floors := Of(nodes, pods, []int64{1, 2, 3})
	if len(floors) != 3 {
		t.Fatalf("%d floors, want one per seed: %+v", len(floors), floors)
	}
	for _, f := range floors {
		if f.LargeSharesPct < 0 || f.OfflineBFDPct < f.LargeSharesPct || f.OfflineBFDPct >= 100 {
			t.Errorf("seed %d: large-share bound %.2f%%, offline BFD %.2f%%: want 0 ≤ bound ≤ BFD < 100", f.Seed, f.LargeSharesPct, f.OfflineBFDPct)
		}
		if f.PlaceEveryFitPct < f.AnyPlacementPct {
			t.Errorf("seed %d: the online floor %.2f%% is below the bound for any placement %.2f%%", f.Seed, f.PlaceEveryFitPct, f.AnyPlacementPct)
		}
		if f.AnyPlacementPct < 0 || f.AnyPlacementPct > f.OfflineBFDPct || f.LPPerGPU <= 0 || len(f.LPWeights) == 0 {
			t.Errorf("seed %d: LP bound %.2f%% (%v per GPU, weights %v), offline BFD %.2f%%: want 0 ≤ bound ≤ BFD and a certificate",
				f.Seed, f.AnyPlacementPct, f.LPPerGPU, f.LPWeights, f.OfflineBFDPct)
		}
	}
}
