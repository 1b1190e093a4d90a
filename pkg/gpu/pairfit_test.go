package gpu_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// sharesAndWholes is a workload whose packing LP prices its sizes like the
// Alibaba trace's: 810 → 810, 650 → 540, 470 → 405, 320 → 270, whole GPUs
// 810 (810, 470 + 470, 650 + 320 and 320 × 3 each weigh 810 on one GPU).
var sharesAndWholes = gpu.StaticShapes{
	{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.4},
	{Demand: gpu.Demand{Count: 1, Milli: 810}, Weight: 0.2},
	{Demand: gpu.Demand{Count: 1, Milli: 650}, Weight: 0.05},
	{Demand: gpu.Demand{Count: 1, Milli: 470}, Weight: 0.2},
	{Demand: gpu.Demand{Count: 1, Milli: 320}, Weight: 0.15},
}

// TestPairFitPrices: the prices make the pairing losses of the shapes'
// natural pairs 0 and of bad pairs the weight they waste.
func TestPairFitPrices(t *testing.T) {
	prices := gpu.PairFitPrices(sharesAndWholes)
	want := map[int64]float64{320: 270, 470: 405, 650: 540, 810: 810, 1000: 810}
	for size, w := range want {
		if got := prices.Weight(size); math.Abs(got-w) > 1e-3 {
			t.Errorf("weight of %d = %v, want %v", size, got, w)
		}
	}
	// A size no typical pod has weighs what the largest typical size below
	// it weighs; below all of them, nothing.
	if got := prices.Weight(500); math.Abs(got-405) > 1e-3 {
		t.Errorf("weight of 500 = %v, want 405 (470's)", got)
	}
	if got := prices.Weight(100); got != 0 {
		t.Errorf("weight of 100 = %v, want 0", got)
	}
	tests := []struct {
		name        string
		free, milli int64
		want        int64
	}{
		// best[1000] = 810, best[530] = 405 (a 470): 810 − 405 − 405.
		{"470 on an idle GPU", 1000, 470, 0},
		// best[530] = 405, best[60] = 0: 405 − 405 − 0.
		{"470 beside a 470", 530, 470, 0},
		// best[530] − 270 − best[210] = 405 − 270 − 0.
		{"320 beside a 470", 530, 320, 135},
		// best[350] = 270 (a 320): 270 − 270 − 0.
		{"320 beside a 650", 350, 320, 0},
		// best[1000] − 270 − best[680] = 810 − 270 − 540 (a 650).
		{"320 on an idle GPU", 1000, 320, 0},
		// best[1000] − 470's 405 − best[500] (a 470: 405) = 0.
		{"500, priced as a 470, on an idle GPU", 1000, 500, 0},
		// best[680] − 540 − best[30] = 540 − 540 − 0.
		{"650 beside a 320", 680, 650, 0},
		// best[1000] − 540 − best[350] = 810 − 540 − 270.
		{"650 on an idle GPU", 1000, 650, 0},
		// best[530] − 0 − best[430] = 405 − 270 (a 320).
		{"100 beside a 470", 530, 100, 135},
	}
	for _, tt := range tests {
		if got := prices.Loss(tt.free, tt.milli); got != tt.want {
			t.Errorf("%s: loss %d, want %d", tt.name, got, tt.want)
		}
	}
	// Typical pods without GPUs, or of no weight, price nothing: no loss.
	for _, shapes := range []gpu.StaticShapes{
		{{Demand: gpu.Demand{MilliCPU: 4000}, Weight: 1}},
		{{Demand: gpu.Demand{Count: 1, Milli: 470}, Weight: 0}},
	} {
		if got := gpu.PairFitPrices(shapes).Loss(530, 320); got != 0 {
			t.Errorf("typical pods %v: loss %d, want 0", shapes, got)
		}
	}
}

// TestPairFitPairsShares: a 320 goes beside a 650 and a 470 beside a 470
// on one node; across nodes a 320 goes beside a 320, where FGD puts it
// beside a 470 (the worked example of docs/policies.md).
func TestPairFitPairsShares(t *testing.T) {
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: sharesAndWholes})
	fgd := gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: sharesAndWholes})
	host := knownHost(64000)
	// GPU 0 holds a 470 (530 free), GPU 1 a 650 (350 free), GPUs 2, 3 idle.
	node := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 4, 0),
		gpu.Assignment{Devices: []int{0}, Milli: 470}, gpu.Assignment{Devices: []int{1}, Milli: 650})
	for _, tt := range []struct {
		milli int64
		want  int
	}{
		// Losses 135 (GPU 0), 0 (GPU 1, 30 left), 0 (GPUs 2, 3, 680 left).
		{320, 1},
		// Losses 0 (GPU 0, 60 left), GPU 1 too small, 0 (GPUs 2, 3, 530 left).
		{470, 0},
	} {
		req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: tt.milli}, Host: host}
		chosen, fit := p.Place(node, &req)
		if !fit.OK() || chosen != 1<<tt.want {
			t.Errorf("a %d: chose %b (%v), want GPU %d", tt.milli, chosen, fit.Reasons, tt.want)
		}
	}
	// Across nodes of two GPUs: a 320 beside a 320 or beside a 470.
	beside320 := nodeWithPods(t, gt.MakeGPUNode("a").GFD("T4", 2, 0), gpu.Assignment{Devices: []int{0}, Milli: 320})
	beside470 := nodeWithPods(t, gt.MakeGPUNode("b").GFD("T4", 2, 0), gpu.Assignment{Devices: []int{0}, Milli: 470})
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 320}, Host: host}
	score := func(p *gpu.Policy, n *gpu.NodeGPUs) int64 {
		chosen, fit := p.Place(n, &req)
		if !fit.OK() {
			t.Fatal(fit.Reasons)
		}
		return p.Score(n, &req, chosen)
	}
	// PairFit: beside the 320 the loss is best[680] − 270 − best[360] =
	// 540 − 270 − 270 = 0; beside the 470 it is 405 − 270 − 0 = 135.
	if a, b := score(p, beside320), score(p, beside470); a <= b {
		t.Errorf("PairFit scores the 320 beside a 320 %d, beside a 470 %d: want the 320 ahead", a, b)
	}
	// FGD: beside the 320, F = 0.6 × 680 = 408 → 0.85 × 360 = 306, level
	// int(100·σ(0.102)) = 52; beside the 470, F = 0.65 × 530 = 344.5 →
	// 1.0 × 210 = 210, level int(100·σ(0.1345)) = 53.
	if a, b := score(fgd, beside320), score(fgd, beside470); a != 52*10000 || b != 53*10000 {
		t.Errorf("FGD scores the 320 beside a 320 %d, beside a 470 %d: want 520000 and 530000", a, b)
	}
}

// pairFitFields are the fields of a PairFit score (pairFit.Score's layout).
type pairFitFields struct{ loss, level, growth, fit int64 }

func pairFitFieldsOf(s int64) pairFitFields {
	return pairFitFields{loss: 1<<17 - s>>43, level: s >> 36 & (1<<7 - 1), growth: s >> 20 & (1<<16 - 1), fit: s & (1<<20 - 1)}
}

// pairFitParts names the fields of a PairFit score.
func pairFitParts(s int64) string {
	f := pairFitFieldsOf(s)
	return fmt.Sprintf("loss %d, level %d, growth key %d, fit %d", f.loss, f.level, f.growth, f.fit)
}

// sharesAndWholesAsking is sharesAndWholes with every typical pod asking
// milliCPU.
func sharesAndWholesAsking(milliCPU int64) gpu.StaticShapes {
	shapes := slices.Clone(sharesAndWholes)
	for i := range shapes {
		shapes[i].Demand.MilliCPU = milliCPU
	}
	return shapes
}

// TestPairFitScore: the score's arithmetic on TestFragFitScore's node.
// Whole GPUs and 500s price at their size (w(1000) = 1000, w(500) = 500)
// and pack without waste, and the typical pods ask no CPU: every loss is 0,
// so the loss key is 2^17 − 0 = 131072.
func TestPairFitScore(t *testing.T) {
	two := gt.MakeGPUNode("n").GFD("T4", 2, 0)
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	host := knownHost(16000)
	host.MaxMilliCPU, host.MaxGPUs = 16000, 2
	const zeroLoss = 1 << 17 << 43
	tests := []scoreCase{
		// Room 1000 + 1000 → 500 + 1000: loss 2000 − 500 − 1500 = 0; a
		// share has no growth key; level and fit as TestFragFitScore's.
		{name: "share splits an idle GPU", node: nodeWithPods(t, two), demand: gpu.Demand{Count: 1, Milli: 500},
			want: zeroLoss + 43<<36 + 131071},
		// 500 + 1000 → 0 + 1000: 1500 − 500 − 1000 = 0.
		{name: "share fills a half-used GPU", node: nodeWithPods(t, two, gpu.Assignment{Devices: []int{0}, Milli: 500}),
			demand: gpu.Demand{Count: 1, Milli: 500}, want: zeroLoss + 56<<36 + 262143},
		// Room 2000 before and after: loss 0. F stays 0: level 50; growth
		// ⌊0/100⌋ + 2^15 = 32768, keyed 2^16 − 1 − 32768 = 32767; fit 262143
		// (TestFragFitScore).
		{name: "CPU-only pod", node: nodeWithPods(t, two), demand: gpu.Demand{MilliCPU: 8000},
			want: zeroLoss + 50<<36 + 32767<<20 + 262143},
		// 2000 − 1000 − 1000 = 0. F 0 → 0 (the other GPU still takes either
		// shape): level 50, key 32767. Fit: ½·16000/16000 + ½·1000/2000 =
		// 0.75 left → 262143.
		{name: "whole GPU", node: nodeWithPods(t, two), demand: gpu.Demand{Count: 1, Milli: 1000},
			want: zeroLoss + 50<<36 + 32767<<20 + 262143},
	}
	checkScores(t, p, host, tests, pairFitParts)
}

// TestPairFitNodeLoss: a node's loss counts its free GPU room only while
// its free CPU and memory admit a typical pod with GPUs, on its models.
func TestPairFitNodeLoss(t *testing.T) {
	// sharesAndWholes' prices (TestPairFitPrices), every typical pod
	// asking 4 CPUs. An idle GPU holds 810.
	withCPU := sharesAndWholesAsking(4000)
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: withCPU})
	two := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 2, 0))
	tests := []struct {
		name    string
		node    *gpu.NodeGPUs
		freeCPU int64
		demand  gpu.Demand
		want    int64
	}{
		// 8 CPUs left: room 810 + 810 → best[530] + 810 = 405 + 810, and
		// the 470 weighs 405: 1620 − 405 − 1215 = 0.
		{"470 keeps CPU for more", two, 12000, gpu.Demand{Count: 1, Milli: 470, MilliCPU: 4000}, 0},
		// 2 CPUs left, too few for any typical pod: 1620 − 405 − 0.
		{"470 takes the last CPU", two, 6000, gpu.Demand{Count: 1, Milli: 470, MilliCPU: 4000}, 1215},
		// 3 CPUs free: the room already held nothing; the share uses it.
		{"470 behind used-up CPU", two, 3000, gpu.Demand{Count: 1, Milli: 470, MilliCPU: 2000}, -405},
		// 1620 − 0 − 0: the pod strands both idle GPUs.
		{"CPU-only pod takes the last CPU", two, 10000, gpu.Demand{MilliCPU: 8000}, 1620},
		// 8 CPUs left: 1620 − 0 − 1620.
		{"CPU-only pod keeps CPU", two, 16000, gpu.Demand{MilliCPU: 8000}, 0},
		// 1620 − 810 − 810 (4 CPUs left, enough for one more).
		{"whole GPU keeps CPU", two, 8000, gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 4000}, 0},
		// 1620 − 810 − 0.
		{"whole GPU takes the last CPU", two, 6000, gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 4000}, 810},
	}
	for _, tt := range tests {
		h := knownHost(tt.freeCPU)
		req := gpu.Request{Demand: &tt.demand, Host: h}
		chosen, fit := p.Place(tt.node, &req)
		if !fit.OK() {
			t.Fatalf("%s: %v", tt.name, fit.Reasons)
		}
		if s := p.Score(tt.node, &req, chosen); pairFitFieldsOf(s).loss != tt.want {
			t.Errorf("%s: %s, want loss %d", tt.name, pairFitParts(s), tt.want)
		}
	}
	// Typical pods that may run only on A100s hold nothing on a T4 node:
	// 0 − 405 − 0.
	a100Only := slices.Clone(withCPU)
	for i := range a100Only {
		a100Only[i].Demand.Models = []string{"A100"}
	}
	p = gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: a100Only})
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 470, MilliCPU: 4000}, Host: knownHost(64000)}
	chosen, _ := p.Place(two, &req)
	if s := p.Score(two, &req, chosen); pairFitFieldsOf(s).loss != -405 {
		t.Errorf("on a node no typical pod may use: %s, want loss -405", pairFitParts(s))
	}
	// Nodes without GPUs, or whose GPUs cannot be read (65 GPUs, no
	// inventory), hold nothing before or after (0 − 0 − 0), and have no
	// models to ask the typical pods about.
	req = gpu.Request{Demand: &gpu.Demand{MilliCPU: 8000}, Host: knownHost(64000)}
	for _, n := range []*gpu.NodeGPUs{nodeWithPods(t, gt.MakeGPUNode("cpu")), nodeWithPods(t, gt.MakeGPUNode("bad").GFD("T4", 65, 0))} {
		if s := p.Score(n, &req, 0); pairFitFieldsOf(s).loss != 0 {
			t.Errorf("a pod without GPUs on node %s (inventory error %v): %s, want loss 0", n.Name, n.Err, pairFitParts(s))
		}
	}
}

// TestPairFitKeepsCPUForGPUs: a CPU-only pod that strands a node's idle
// GPUs wherever it goes strands the fewest under PairFit; FGD's level,
// a sigmoid of the fragment's change, is 0 for both nodes.
func TestPairFitKeepsCPUForGPUs(t *testing.T) {
	withCPU := sharesAndWholesAsking(4000)
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: withCPU})
	fgd := gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: withCPU})
	eight := nodeWithPods(t, gt.MakeGPUNode("a").GFD("T4", 8, 0))
	six := nodeWithPods(t, gt.MakeGPUNode("b").GFD("T4", 6, 0))
	// 10 CPUs free on each; the pod leaves 2, too few for any typical pod.
	h := knownHost(10000)
	h.MaxMilliCPU, h.MaxGPUs = 64000, 8
	req := gpu.Request{Demand: &gpu.Demand{MilliCPU: 8000}, Host: h}
	// PairFit: losses 8 × 810 = 6480 and 6 × 810 = 4860.
	if a, b := p.Score(eight, &req, 0), p.Score(six, &req, 0); a >= b {
		t.Errorf("PairFit scores 8 stranded GPUs %d (%s), 6 stranded %d (%s): want the 6 ahead",
			a, pairFitParts(a), b, pairFitParts(b))
	}
	// FGD: F 0 → 8000 and 0 → 6000: int(100·σ(−8)) = int(100·σ(−6)) = 0.
	if a, b := fgd.Score(eight, &req, 0), fgd.Score(six, &req, 0); a != 0 || b != 0 {
		t.Errorf("FGD scores 8 stranded GPUs %d, 6 stranded %d: want 0 and 0", a, b)
	}
}

// TestPairFitGrowthStep: pods of equal loss and level are keyed by the
// fragment's growth in steps of 100 milli-GPU.
func TestPairFitGrowthStep(t *testing.T) {
	// One typical pod: a whole GPU with 8 CPUs. A CPU-only pod of 8 CPUs on
	// a node with 16 free CPUs and 4 idle GPUs strands nothing (loss 0;
	// F 0 → 0, level 50, growth key 2^16 − 1 − (0 + 2^15) = 32767); on one
	// with 12 free CPUs it strands all 4 GPUs (loss 4 × 1000, a GPU's
	// weight when whole GPUs are all there is; F 0 → 4000, level
	// int(100·σ(−4)) = 1, growth key 2^16 − 1 − (40 + 2^15) = 32727).
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 8000}, Weight: 1}}
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes})
	node := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 4, 0))
	for _, tt := range []struct {
		freeCPU, loss, level, growth int64
	}{
		{16000, 0, 50, 32767},
		{12000, 4000, 1, 32727},
	} {
		h := knownHost(tt.freeCPU)
		h.MaxMilliCPU, h.MaxGPUs = 64000, 4
		s := p.Score(node, &gpu.Request{Demand: &gpu.Demand{MilliCPU: 8000}, Host: h}, 0)
		if f := pairFitFieldsOf(s); f.loss != tt.loss || f.level != tt.level || f.growth != tt.growth {
			t.Errorf("with %d milli-CPU free: %s; want loss %d, level %d, growth key %d", tt.freeCPU, pairFitParts(s), tt.loss, tt.level, tt.growth)
		}
	}
}

// TestPairFitPricesOnce: typical pods that a ShapeWindow hands out anew
// with the same item mix (here: other CPU requests, same GPU items) are
// not priced again; a mix that moved is.
func TestPairFitPricesOnce(t *testing.T) {
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: sharesAndWholes})
	first := gpu.PairFitPricing(p, sharesAndWholes)
	sameMix := sharesAndWholesAsking(4000)
	if again := gpu.PairFitPricing(p, sameMix); again != first {
		t.Error("the same item mix was priced again")
	}
	moved := slices.Clone(sharesAndWholes)
	moved[4].Weight += 0.01 // 320s: 15% → 16% of the pods
	if again := gpu.PairFitPricing(p, moved); again == first {
		t.Error("a mix whose 320s moved from 15% to 16% was not priced again")
	}
}
