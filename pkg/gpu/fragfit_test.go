package gpu_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

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
			want: 43<<20 + 131071},
		// Level 56. Fit: ½·1 + ½·1000/2000 = 0.75 left, int(0.25 × (2^20 − 1)) = 262143.
		{name: "share fills a half-used GPU", node: nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 500}),
			demand: gpu.Demand{Count: 1, Milli: 500}, want: 56<<20 + 262143},
		// A pod without GPUs takes 8 CPUs: both shapes need no CPU, F stays 0:
		// level 50. Fit: ½·8000/16000 + ½·2000/2000 = 0.75 left → 262143.
		{name: "CPU-only pod", node: nodeWithPods(t, two), demand: gpu.Demand{MilliCPU: 8000},
			want: 50<<20 + 262143},
	}
	checkScores(t, p, host, tests, func(s int64) string {
		return fmt.Sprintf("level %d, fit %d", s>>20, s&(1<<20-1))
	})
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
	}{{idle, 50<<20 + 786431}, {busy, 50<<20 + 1048575}} {
		chosen, _ := p.Place(tc.n, &req)
		if got := p.Score(tc.n, &req, chosen); got != tc.want {
			t.Errorf("score = %d (level %d, fit %d), want %d", got, got>>20, got&(1<<20-1), tc.want)
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
