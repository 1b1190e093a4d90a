package gpu_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestPolicyScore(t *testing.T) {
	// Four 40 GiB GPUs: 4000 milli-GPU and 163840 MiB in all.
	fourA100 := gt.MakeGPUNode("n").GFD("A100", 4, 40960)
	idle := nodeWithPods(t, fourA100)
	halfGPU0 := nodeWithPods(t, fourA100, gpu.Assignment{Devices: []int{0}, Milli: 500, MemoryMiB: 10240})
	share := func(milli, mem int64) gpu.Demand { return gpu.Demand{Count: 1, Milli: milli, MemoryMiB: mem} }
	whole := func(n int) gpu.Demand { return gpu.Demand{Count: n, Milli: 1000} }
	gpuOnly, both := gpu.Weights{GPU: 1}, gpu.Weights{GPU: 1, Memory: 1}

	tests := []struct {
		name    string
		policy  gpu.PolicyType
		weights gpu.Weights
		node    *gpu.NodeGPUs
		demand  gpu.Demand
		want    int64
	}{
		// BestFit = 1e6 × Σ w·allocated/capacity / Σ w, after placement.
		{name: "best-fit, idle, 1 GPU", policy: gpu.PolicyBestFit, weights: gpuOnly, node: idle, demand: whole(1),
			want: 250000}, // 1e6 × 1000/4000
		{name: "best-fit, share joins GPU 0", policy: gpu.PolicyBestFit, weights: gpuOnly, node: halfGPU0, demand: share(250, 0),
			want: 187500}, // 1e6 × (500+250)/4000
		{name: "best-fit, compute and memory, 2 GPUs", policy: gpu.PolicyBestFit, weights: both, node: idle, demand: whole(2),
			want: 500000}, // 1e6 × (2000/4000 + 81920/163840) / 2
		{name: "best-fit, compute and memory, share", policy: gpu.PolicyBestFit, weights: both, node: idle, demand: share(500, 20480),
			want: 125000}, // 1e6 × (500/4000 + 20480/163840) / 2
		{name: "best-fit, a share that fills its GPU takes its memory", policy: gpu.PolicyBestFit, weights: both, node: halfGPU0, demand: share(500, 0),
			want: 250000}, // 1e6 × (1000/4000 + 40960/163840) / 2
		// Spread = 1e6 − BestFit.
		{name: "spread, idle, 1 GPU", policy: gpu.PolicySpread, weights: gpuOnly, node: idle, demand: whole(1),
			want: 750000}, // 1e6 − 1e6 × 1000/4000
		// Packing = band × 333333 + BestFit/3.
		{name: "packing, idle node", policy: gpu.PolicyPacking, weights: gpuOnly, node: idle, demand: share(250, 0),
			want: 20833}, // band 0; (1e6 × 250/4000) / 3 = 62500/3
		{name: "packing, used node, free GPU", policy: gpu.PolicyPacking, weights: gpuOnly, node: halfGPU0, demand: whole(1),
			want: 458333}, // band 1: 333333 + (1e6 × 1500/4000)/3 = 333333 + 125000
		{name: "packing, partly used GPU", policy: gpu.PolicyPacking, weights: gpuOnly, node: halfGPU0, demand: share(250, 0),
			want: 729166}, // band 2: 666666 + (1e6 × 750/4000)/3 = 666666 + 62500
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := gpu.NewPolicy(tt.policy, gpu.PolicyConfig{Weights: tt.weights})
			if err != nil {
				t.Fatal(err)
			}
			req := gpu.Request{Demand: &tt.demand}
			chosen, fit := p.Place(tt.node, &req)
			if !fit.OK() {
				t.Fatalf("does not fit: %v", fit.Reasons)
			}
			if got := p.Score(tt.node, &req, chosen); got != tt.want {
				t.Errorf("score = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPolicyChoose(t *testing.T) {
	// GPU 0 has 500 free, GPU 1 250 free, GPU 2 1000 free.
	shares := nodeWithPods(t, gt.MakeGPUNode("n").GFD("A100", 3, 40960),
		gpu.Assignment{Devices: []int{0}, Milli: 500},
		gpu.Assignment{Devices: []int{1}, Milli: 750})
	// GPUs 0-3 in NVLink group a, 4-7 in group b; GPU 0 busy.
	var devices []gpu.Device
	for i := range 8 {
		devices = append(devices, gpu.Device{Index: i, Model: "H100", Group: map[bool]string{true: "a", false: "b"}[i < 4]})
	}
	groups := nodeWithPods(t, gt.MakeGPUNode("n").Devices(devices...), gpu.Assignment{Devices: []int{0}, Milli: 1000})

	tests := []struct {
		name   string
		policy gpu.PolicyType
		node   *gpu.NodeGPUs
		demand gpu.Demand
		want   gpu.DeviceSet
	}{
		{name: "best-fit share: tightest GPU", policy: gpu.PolicyBestFit, node: shares, demand: gpu.Demand{Count: 1, Milli: 200}, want: 0b010},
		{name: "best-fit share skips a GPU too full", policy: gpu.PolicyBestFit, node: shares, demand: gpu.Demand{Count: 1, Milli: 300}, want: 0b001},
		{name: "spread share: loosest GPU", policy: gpu.PolicySpread, node: shares, demand: gpu.Demand{Count: 1, Milli: 200}, want: 0b100},
		{name: "3 GPUs: the smaller group that holds them", policy: gpu.PolicyBestFit, node: groups, demand: gpu.Demand{Count: 3, Milli: 1000}, want: 0b0000_1110},
		{name: "4 GPUs: only group b holds them", policy: gpu.PolicyBestFit, node: groups, demand: gpu.Demand{Count: 4, Milli: 1000}, want: 0b1111_0000},
		{name: "5 GPUs: all of b, then the lowest of a", policy: gpu.PolicySpread, node: groups, demand: gpu.Demand{Count: 5, Milli: 1000}, want: 0b1111_0010},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := gpu.MustPolicy(tt.policy, gpu.PolicyConfig{})
			got, fit := p.Place(tt.node, &gpu.Request{Demand: &tt.demand})
			if !fit.OK() || got != tt.want {
				t.Errorf("chose %08b (reasons %v), want %08b", got, fit.Reasons, tt.want)
			}
		})
	}
}

func TestNewPolicyRejects(t *testing.T) {
	allowed := "want one of " + strings.Join(gpu.PolicyNames(), ", ")
	if _, err := gpu.NewPolicy("Tetris", gpu.PolicyConfig{}); err == nil || err.Error() != `unknown policy "Tetris": `+allowed {
		t.Errorf("unknown type: err = %v, want one naming every policy", err)
	}
	if _, err := gpu.NewPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{Weights: gpu.Weights{GPU: -1, Memory: 2}}); err == nil {
		t.Error("negative weight accepted")
	}
	if _, err := gpu.NewPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{}); err == nil {
		t.Error("FragFit without shapes accepted")
	}
}

func TestRegistry(t *testing.T) {
	names := gpu.PolicyNames()
	if len(names) != len(gpu.Policies()) {
		t.Fatalf("%d names for %d policies", len(names), len(gpu.Policies()))
	}
	if _, err := gpu.LookupPolicy(string(gpu.DefaultPolicy)); err != nil {
		t.Errorf("the default policy is not registered: %v", err)
	}
	for _, info := range gpu.Policies() {
		if info.Summary == "" {
			t.Errorf("%s has no summary", info.Type)
		}
		p, err := gpu.NewPolicy(info.Type, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
		if err != nil {
			t.Errorf("%s: %v", info.Type, err)
			continue
		}
		if p.Type() != info.Type || (p.Shapes() != nil) != info.NeedsShapes {
			t.Errorf("%s: built %s with shapes %v", info.Type, p.Type(), p.Shapes())
		}
	}
}

func TestRescaleMinMax(t *testing.T) {
	tests := []struct {
		scores []int64
		maxOut int64
		want   []int64
	}{
		// (s − 250000) × 100 / 500000: 0, 100, 10.
		{scores: []int64{250000, 750000, 300000}, maxOut: 100, want: []int64{0, 100, 10}},
		// (500000 − 250000) × 10 / 500000 = 5.
		{scores: []int64{250000, 500000, 750000}, maxOut: 10, want: []int64{0, 5, 10}},
		{scores: []int64{42, 42}, maxOut: 100, want: []int64{100, 100}}, // all equal: all best
	}
	for _, tt := range tests {
		got := slices.Clone(tt.scores)
		if gpu.RescaleMinMax(got, tt.maxOut); !slices.Equal(got, tt.want) {
			t.Errorf("RescaleMinMax(%v, %d) = %v, want %v", tt.scores, tt.maxOut, got, tt.want)
		}
	}
}

// TestPolicyRescale: an ordinal policy rescales by rank, the others min-max.
func TestPolicyRescale(t *testing.T) {
	raw := []int64{10, 1000, 20}
	for _, info := range gpu.Policies() {
		p := gpu.MustPolicy(info.Type, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
		got := slices.Clone(raw)
		p.Rescale(got, 100)
		want := []int64{0, 100, 1} // min-max: (20 − 10) × 100 / 990 = 1
		if info.Ordinal {
			want = []int64{98, 100, 99}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Rescale(%v) = %v, want %v", info.Type, raw, got, want)
		}
	}
}

// TestPolicyScores: a pod that asks for GPUs is scored by every policy; a
// pod without GPU demand only by the policies that weigh the node's CPU and
// memory (PairFit, the default, among them), and the policies that weigh
// GPUs alone leave it to the scheduler's other scores.
func TestPolicyScores(t *testing.T) {
	cpuOnly := &gpu.Demand{MilliCPU: 4000, HostMemoryMiB: 8192}
	whole := &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	scoresNoGPU := map[gpu.PolicyType]bool{
		gpu.PolicyPairFit: true, gpu.PolicyFragFit: true, gpu.PolicyFGD: true, gpu.PolicyBestFitCPUGPU: true,
		gpu.PolicyRandom: true, gpu.PolicyDotProd: true,
		gpu.PolicyBestFit: false, gpu.PolicySpread: false, gpu.PolicyPacking: false,
		gpu.PolicyGpuClustering: false, gpu.PolicyGpuPacking: false,
	}
	for _, name := range gpu.PolicyNames() {
		want, listed := scoresNoGPU[gpu.PolicyType(name)]
		if !listed {
			t.Errorf("policy %s is not in the table: say whether it scores pods without GPUs", name)
			continue
		}
		p := gpu.MustPolicy(gpu.PolicyType(name), gpu.PolicyConfig{Shapes: gpu.StaticShapes{}})
		if got := p.Scores(cpuOnly); got != want {
			t.Errorf("%s scores a pod without GPUs: %v, want %v", name, got, want)
		}
		if got := p.Scores(nil); got != want {
			t.Errorf("%s scores a request without a demand: %v, want %v", name, got, want)
		}
		if !p.Scores(whole) {
			t.Errorf("%s does not score a pod that asks for a GPU", name)
		}
	}
}
