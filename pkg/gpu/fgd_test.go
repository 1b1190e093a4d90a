package gpu_test

import (
	"fmt"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// Typical pods for these tests: a whole GPU and a 500 milli-GPU share, half
// each, neither needing CPU.
var halfWholeHalfShare = gpu.StaticShapes{
	{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.5},
	{Demand: gpu.Demand{Count: 1, Milli: 500}, Weight: 0.5},
}

func TestFGDScore(t *testing.T) {
	two := gt.MakeGPUNode("n").GFD("T4", 2, 0)
	fgd := gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	host := knownHost(16000)
	// Scores are FGD's level × 10000 (0..MaxScore).
	tests := []scoreCase{
		// Before: free (1000, 1000): both shapes fit, nothing too small: F = 0.
		// After a 500 share on GPU 0: free (500, 1000): the whole GPU cannot
		// use GPU 0's 500: F = ½·500 = 250. int(100·σ(−250/1000)) = int(43.78) = 43.
		{name: "share splits an idle GPU", node: nodeWithPods(t, two), demand: gpu.Demand{Count: 1, Milli: 500}, want: 43 * 10000},
		// Before: free (500, 1000): F = ½·500 = 250. After the share fills
		// GPU 0: free (0, 1000): F = 0. int(100·σ(250/1000)) = int(56.22) = 56.
		{name: "share fills a half-used GPU", node: nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 500}),
			demand: gpu.Demand{Count: 1, Milli: 500}, want: 56 * 10000},
		// Before: free (500, 1000): F = 250. After a whole GPU on GPU 1: free
		// (500, 0): no GPU has 1000 free, so the whole GPU cannot use any of the
		// 500: ½·500; the share fits: 0. F = 250: no change, int(100·σ(0)) = 50.
		{name: "whole GPU beside a half-used one", node: nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 500}),
			demand: gpu.Demand{Count: 1, Milli: 1000}, want: 50 * 10000},
	}
	checkScores(t, fgd, host, tests, func(s int64) string { return fmt.Sprintf("level %d", s/10000) })
}

// TestFGDChoose: a share goes on the GPU where fragmentation grows least.
func TestFGDChoose(t *testing.T) {
	// GPU 0 has 500 free, GPU 1 is idle. On GPU 0 (scored above): 56; on
	// GPU 1: free (500, 500), the whole GPU fits nowhere: F = ½·1000 = 500,
	// from 250: int(100·σ(−0.25)) = 43. GPU 0 wins.
	n := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 2, 0), gpu.Assignment{Devices: []int{0}, Milli: 500})
	d := gpu.Demand{Count: 1, Milli: 500}
	fgd := gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	if got, _ := fgd.Place(n, &gpu.Request{Demand: &d, Host: knownHost(16000)}); got != 1<<0 {
		t.Errorf("share on GPUs %b, want GPU 0", got)
	}
}

func TestShapeWindow(t *testing.T) {
	seed := []gpu.TypicalPod{{Demand: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 8000}, Weight: 1}}
	share := gpu.Demand{Count: 1, Milli: 250, MilliCPU: 2000}

	fixed := gpu.NewShapeWindow(0, seed)
	for range 100 {
		fixed.Observe(share)
	}
	if got := fixed.Typical(); len(got) != 1 || got[0].Demand.Milli != 1000 {
		t.Errorf("half-life 0: typical = %+v, want the seed alone", got)
	}

	// Half-life 2: the seed counts as 2 pods; 64 observations later it weighs
	// 2 against Σ 2^(k/2), k < 64 — far below 5%, so it drops out.
	learning := gpu.NewShapeWindow(2, seed)
	if got := learning.Typical(); len(got) != 1 || got[0].Demand.Milli != 1000 {
		t.Fatalf("before any pod: typical = %+v, want the seed", got)
	}
	for range 64 {
		learning.Observe(share)
	}
	if got := learning.Typical(); len(got) != 1 || got[0].Demand.Milli != 250 || got[0].Weight != 1 {
		t.Errorf("after 64 shares: typical = %+v, want the share alone", got)
	}
}

// TestShapeWindowDeterministic: a seed whose heaviest shapes cover exactly
// TypicalCoverage gives the same typical pods every time. One shape of
// weight 2 and 18 of weight 1 (the typical pods of 21 pods of 20 shapes,
// as the simulator passes them): the heaviest shape and 17 others cover
// 0.1 + 17 × 0.05 = 0.95 of the weight, so whether the 19th is kept turns
// on the last bit of the total. Summed in map order, the total differed
// from one window to the next.
func TestShapeWindowDeterministic(t *testing.T) {
	seed := []gpu.TypicalPod{{Demand: gpu.Demand{MilliCPU: 100}, Weight: 100_000}}
	for i := range 18 {
		seed = append(seed, gpu.TypicalPod{Demand: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: int64(200 + 100*i)}, Weight: 50_000})
	}
	want := len(gpu.NewShapeWindow(0, seed).Typical())
	for range 200 {
		if got := len(gpu.NewShapeWindow(0, seed).Typical()); got != want {
			t.Fatalf("the same seed gave %d typical pods, then %d", want, got)
		}
	}
}
