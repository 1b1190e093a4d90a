package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestScoreStep: the score step is PlaceAndScore on every node of the step
// and the policy's rescaling over them, a node the demand does not fit
// taking part with 0 and a nil view (outside the step) not at all; a pod
// the policy does not score is placed and scores 0 everywhere; running the
// placements in ranges (as the extender does, in parallel) changes nothing.
func TestScoreStep(t *testing.T) {
	bestFit := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{}) // min-max rescaling, not host-aware
	whole := func(devices ...int) gpu.Assignment { return gpu.Assignment{Devices: devices, Milli: gpu.MilliPerGPU} }
	tight := nodeWithPods(t, gt.MakeGPUNode("tight").GFD("A100", 4, 81920), whole(0, 1, 2)) // 1 GPU free: best fit
	loose := nodeWithPods(t, gt.MakeGPUNode("loose").GFD("A100", 4, 81920), whole(0))       // 3 free
	full := nodeWithPods(t, gt.MakeGPUNode("full").GFD("A100", 2, 81920), whole(0, 1))      // none free
	one := gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	cpuOnly := gpu.Demand{MilliCPU: 1000}

	rawOf := func(view *gpu.NodeGPUs, d gpu.Demand) int64 {
		_, _, raw := bestFit.PlaceAndScore(view, &gpu.Request{Demand: &d})
		return raw
	}
	rTight, rLoose := rawOf(tight, one), rawOf(loose, one)
	if rTight <= rLoose || rLoose <= 0 {
		t.Fatalf("fixture: best fit scores tight %d, loose %d; want tight > loose > 0", rTight, rLoose)
	}
	tests := []struct {
		name   string
		views  []*gpu.NodeGPUs
		demand gpu.Demand
		want   []int64 // rescaled to 0..10
		fits   []bool
	}{
		// Min-max over tight, loose and full's 0: tight 10, loose
		// rLoose×10/rTight (rounded down), full 0.
		{"a node that does not fit takes part", []*gpu.NodeGPUs{tight, loose, full}, one,
			[]int64{10, rLoose * 10 / rTight, 0}, []bool{true, true, false}},
		// Min-max over tight and loose alone: 10 and 0; the nil view
		// would have made loose's score positive had it counted as 0.
		{"a nil view takes no part", []*gpu.NodeGPUs{tight, loose, nil}, one,
			[]int64{10, 0, 0}, []bool{true, true, false}},
		// The same with the node outside the step first: its request is
		// empty (the extender fills none), and the step still scores.
		{"a nil view first", []*gpu.NodeGPUs{nil, tight, loose}, one,
			[]int64{0, 10, 0}, []bool{false, true, true}},
		// BestFit weighs GPUs alone: a CPU-only pod is placed, not scored.
		{"a pod the policy does not score", []*gpu.NodeGPUs{tight, loose, full}, cpuOnly,
			[]int64{0, 0, 0}, []bool{true, true, true}},
	}
	ranges := func(n int, f func(lo, hi int)) { // one node at a time, last first
		for i := n - 1; i >= 0; i-- {
			f(i, i+1)
		}
	}
	for _, tt := range tests {
		reqs := make([]gpu.Request, len(tt.views))
		for i := range reqs {
			if tt.views[i] != nil { // a node outside the step has no request
				reqs[i] = gpu.Request{Demand: &tt.demand}
			}
		}
		for _, each := range []func(int, func(int, int)){nil, ranges} {
			out := make([]gpu.NodeScore, len(tt.views))
			for i := range out {
				out[i] = gpu.NodeScore{Score: 99, Raw: 99, Fits: true} // overwritten
			}
			bestFit.ScoreStep(tt.views, reqs, 10, each, out)
			for i, v := range tt.views {
				if out[i].Score != tt.want[i] || out[i].Fits != tt.fits[i] {
					t.Errorf("%s, node %d: score %d, fits %t; want %d, %t", tt.name, i, out[i].Score, out[i].Fits, tt.want[i], tt.fits[i])
				}
				if v == nil || !out[i].Fits {
					continue
				}
				chosen, _, raw := bestFit.PlaceAndScore(v, &reqs[i])
				if out[i].Chosen != chosen || (bestFit.Scores(&tt.demand) && out[i].Raw != raw) {
					t.Errorf("%s, node %d: chose %v with raw %d; PlaceAndScore chooses %v with %d", tt.name, i, out[i].Chosen, out[i].Raw, chosen, raw)
				}
			}
		}
	}
}
