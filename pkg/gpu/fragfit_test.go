package gpu_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// fragFitScore is FragFit's score of a level and a fit: level << 20 + fit.
func fragFitScore(level, fit int64) int64 { return level<<20 + fit }

func describeFragFit(s int64) string {
	return fmt.Sprintf("level %d, fit %d", s>>20, s&(1<<20-1))
}

func TestFragFitScore(t *testing.T) {
	two := gt.MakeGPUNode("n").GFD("T4", 2, 0)
	p := gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	// The largest node: 16 CPUs, 2 GPUs (2000 milli-GPU).
	host := knownHost(16000)
	host.MaxMilliCPU, host.MaxGPUs = 16000, 2
	tests := []scoreCase{
		// Level as FGD's: 43 (see TestFGDScore). Fit: ½·16000/16000 + ½·1500/2000
		// = 0.875 left, int(0.125 × (2^20 − 1)) = 131071. 43·2^20 + 131071.
		{name: "share splits an idle GPU", node: nodeWithPods(t, two), demand: gpu.Demand{Count: 1, Milli: 500},
			want: fragFitScore(43, 131071)},
		// Level 56. Fit: ½·1 + ½·1000/2000 = 0.75 left, int(0.25 × (2^20 − 1)) = 262143.
		{name: "share fills a half-used GPU", node: nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 500}),
			demand: gpu.Demand{Count: 1, Milli: 500}, want: fragFitScore(56, 262143)},
		// A pod without GPUs takes 8 CPUs: both shapes need no CPU, F stays 0:
		// level 50. Fit: ½·8000/16000 + ½·2000/2000 = 0.75 left → 262143.
		{name: "CPU-only pod", node: nodeWithPods(t, two), demand: gpu.Demand{MilliCPU: 8000},
			want: fragFitScore(50, 262143)},
	}
	checkScores(t, p, host, tests, describeFragFit)
}

// TestFragFitModelPressure: a pod that takes GPUs of a model that
// model-limited typical pods would find full strands, for them, the
// model's pressure times the milli-GPU it takes, which FragFit counts in
// the fragment F. The fleet of TestPairFitModelPrices (2 T4s, 2 A100s);
// the typical pods: whole GPUs, 96 % of any model, 4 % limited to T4s.
// The LP shares 1000 GPUs as the fleet does, 500 per model; the T4s get
// their 40 items and 960 × 500/1000 of the others: pressure
// 1 − 500/520 = 1/26; the A100s' is 0. A pod of any model on an idle node
// of two GPUs: on a T4 every free GPU holds any typical pod, F 0 before,
// 0 + 1000/26 = 38.5 after: level int(100 / (1 + e^0.0385)) = 49; on an
// A100 the T4 items strand 0.04 × 2000 = 80 before and 40 after: level
// int(100 / (1 + e^−0.04)) = 50. Fit, both: ½·0 + ½·1000/2000 left = 0.25
// → int(0.75 × (2^20 − 1)) = 786431. Without the pressure the two tie
// (level 50 on the T4 too), and the A100 is chosen only by the
// scheduler's tie-break.
func TestFragFitModelPressure(t *testing.T) {
	whole := func(models ...string) gpu.Demand { return gpu.Demand{Count: 1, Milli: 1000, Models: models} }
	fewOnT4 := gpu.StaticShapes{{Demand: whole(), Weight: 0.96}, {Demand: whole("T4"), Weight: 0.04}}
	t4 := nodeWithPods(t, gt.MakeGPUNode("t4").GFD("T4", 2, 0))
	a100 := nodeWithPods(t, gt.MakeGPUNode("a100").GFD("A100", 2, 0))
	for _, tc := range []struct {
		name  string
		fleet gpu.Fleet
		node  *gpu.NodeGPUs
		want  int64
	}{
		{"any model on a T4 the T4 pods need", fleetOf(twoT4TwoA100), t4, fragFitScore(49, 786431)},
		{"any model on an A100", fleetOf(twoT4TwoA100), a100, fragFitScore(50, 786431)},
		// Without a fleet the models are not known: no pressure.
		{"no fleet, on a T4", nil, t4, fragFitScore(50, 786431)},
	} {
		p := gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: fewOnT4, Fleet: tc.fleet})
		req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}}
		chosen, fit := p.Place(tc.node, &req)
		if !fit.OK() {
			t.Fatalf("%s: %v", tc.name, fit.Reasons)
		}
		if got := p.Score(tc.node, &req, chosen); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, describeFragFit(got), describeFragFit(tc.want))
		}
	}
}

// TestFragFitMemory: a typical pod that no longer fits the node's memory
// cannot use its GPUs either.
func TestFragFitMemory(t *testing.T) {
	n := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 2, 0))
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000, HostMemoryMiB: 8192}, Weight: 1}}
	if got := n.FragmentWithMemory(16000, 16384, shapes); got != 0 {
		t.Errorf("with 16 GiB free: fragment %v, want 0", got)
	}
	if got := n.FragmentWithMemory(16000, 4096, shapes); got != 2000 {
		t.Errorf("with 4 GiB free: fragment %v, want 2000 (all free milli-GPU)", got)
	}
}

// TestFragFitUnknownHost: with the host unknown, FragFit's fit term weighs
// the GPUs alone, so a fuller node still scores higher (not a constant 0).
func TestFragFitUnknownHost(t *testing.T) {
	p := gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	two := gt.MakeGPUNode("n").GFD("T4", 2, 0)
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}}
	idle, busy := nodeWithPods(t, two), nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 1000})
	// Idle: ½·0 (CPU unknown) + ½·1000/2000 left = 0.25, int(0.75 × (2^20 − 1)) = 786431.
	// Busy: ½·0 + ½·0/2000 = 0 left → 2^20 − 1 = 1048575. Levels: idle F 0 → 0,
	// whole GPU fits nowhere after: F = 0 → 50; busy F 0 → 0 → 50.
	for _, tc := range []struct {
		n    *gpu.NodeGPUs
		want int64
	}{{idle, fragFitScore(50, 786431)}, {busy, fragFitScore(50, 1048575)}} {
		chosen, _ := p.Place(tc.n, &req)
		if got := p.Score(tc.n, &req, chosen); got != tc.want {
			t.Errorf("score = %d (%s), want %d", got, describeFragFit(got), tc.want)
		}
	}
}

func TestRescaleByRank(t *testing.T) {
	// Distinct scores 1 < 5 < 9: 9 → 100, 5 → 99, 1 → 98; equal scores stay equal.
	got := []int64{5, 9, 9, 1}
	if gpu.RescaleByRank(got, 100); !slices.Equal(got, []int64{99, 100, 100, 98}) {
		t.Errorf("RescaleByRank = %v, want [99 100 100 98]", got)
	}
	// More distinct scores than levels: the lowest floor at 0.
	got = []int64{1, 2, 3, 4}
	if gpu.RescaleByRank(got, 2); !slices.Equal(got, []int64{0, 0, 1, 2}) {
		t.Errorf("RescaleByRank = %v, want [0 0 1 2]", got)
	}
}
