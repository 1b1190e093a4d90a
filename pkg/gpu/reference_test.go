package gpu_test

import (
	"fmt"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestReferencePolicyScore checks each FGD-paper policy against its formula.
// Scores are the paper's integer 0..100 times 10000.
func TestReferencePolicyScore(t *testing.T) {
	eight := gt.MakeGPUNode("n").GFD("G2", 8, 0)
	two := gt.MakeGPUNode("n").GFD("T4", 2, 0)
	idle8 := nodeWithPods(t, eight)
	// GPU 0 has 300 milli-GPU of a share; GPUs 1 and 2 are taken whole.
	mixed8 := nodeWithPods(t, eight,
		gpu.Assignment{Devices: []int{0}, Milli: 300},
		gpu.Assignment{Devices: []int{1, 2}, Milli: 1000})
	// Only shares: GPU 0 holds 300 milli-GPU.
	shares8 := nodeWithPods(t, eight, gpu.Assignment{Devices: []int{0}, Milli: 300})
	// Only 2-GPU pods.
	pairs8 := nodeWithPods(t, eight, gpu.Assignment{Devices: []int{0, 1}, Milli: 1000})
	idle2 := nodeWithPods(t, two)
	share := func(milli, cpu int64) gpu.Demand { return gpu.Demand{Count: 1, Milli: milli, MilliCPU: cpu} }
	whole := func(n int, cpu int64) gpu.Demand { return gpu.Demand{Count: n, Milli: 1000, MilliCPU: cpu} }
	// The largest node has 128 CPUs and 8 GPUs, as in the Alibaba cluster.
	host := func(freeCPU int64) gpu.Host {
		return gpu.Host{Known: true, FreeMilliCPU: freeCPU, FreeMemoryMiB: 1 << 30, MaxMilliCPU: 128000, MaxGPUs: 8}
	}

	tests := []struct {
		name   string
		policy gpu.PolicyType
		node   *gpu.NodeGPUs
		host   gpu.Host
		demand gpu.Demand
		want   int64
	}{
		// BestFitCPUGPU = int(100 × (1 − ½(freeCPU − cpu)/128000 − ½(freeGPU − gpu)/8000)).
		{name: "best-fit cpu+gpu, idle 8-GPU node", policy: gpu.PolicyBestFitCPUGPU, node: idle8, host: host(96000), demand: whole(1, 32000),
			want: 31 * 10000}, // 1 − ½·64000/128000 − ½·7000/8000 = 1 − 0.25 − 0.4375 = 0.3125
		{name: "best-fit cpu+gpu, idle 2-GPU node", policy: gpu.PolicyBestFitCPUGPU, node: idle2, host: host(16000), demand: share(500, 8000),
			want: 87 * 10000}, // 1 − ½·8000/128000 − ½·1500/8000 = 1 − 0.03125 − 0.09375 = 0.875
		{name: "best-fit cpu+gpu, CPU-only pod", policy: gpu.PolicyBestFitCPUGPU, node: mixed8, host: host(64000), demand: gpu.Demand{MilliCPU: 64000},
			want: 64 * 10000}, // 1 − ½·(64000−64000)/128000 − ½·(5700−0)/8000 = 1 − 0.35625 = 0.64375
		// DotProd = int(100 × (1 − (freeCPU/128000 · cpu/128000 + freeGPU/8000 · gpu/8000)/2)).
		{name: "dot product, idle 8-GPU node", policy: gpu.PolicyDotProd, node: idle8, host: host(128000), demand: whole(8, 64000),
			want: 25 * 10000}, // 1 − (1·0.5 + 1·1)/2 = 0.25
		{name: "dot product, mixed node, share", policy: gpu.PolicyDotProd, node: mixed8, host: host(32000), demand: share(400, 16000),
			want: 96 * 10000}, // 1 − (0.25·0.125 + 0.7125·0.05)/2 = 1 − (0.03125 + 0.035625)/2 = 0.9665625
		// GpuPacking: idle node 33 − GPUs; k fully free GPUs taken: max(50 − k, 33);
		// only partly used GPUs: max(100 − Σ free%/10, 50).
		{name: "packing, idle 8-GPU node", policy: gpu.PolicyGpuPacking, node: idle8, demand: share(500, 0),
			want: 25 * 10000}, // 33 − 8
		{name: "packing, idle 2-GPU node", policy: gpu.PolicyGpuPacking, node: idle2, demand: share(500, 0),
			want: 31 * 10000}, // 33 − 2: smaller idle nodes first
		{name: "packing, share on partly used GPU", policy: gpu.PolicyGpuPacking, node: mixed8, demand: share(500, 0),
			want: 93 * 10000}, // GPU 0 has 70% free: 100 − 70/10
		{name: "packing, whole GPUs on a used node", policy: gpu.PolicyGpuPacking, node: mixed8, demand: whole(2, 0),
			want: 48 * 10000}, // two fully free GPUs taken: 50 − 2
		// GpuClustering = band + 25 × (8000 − freeGPU)/8000 (integer division),
		// band 75 same class only, 50 mixed with it, 25 no GPU pods, 0 else.
		{name: "clustering, share joins shares only", policy: gpu.PolicyGpuClustering, node: shares8, demand: share(100, 0),
			want: 75 * 10000}, // 75 + 25·300/8000 = 75 + 0
		{name: "clustering, 2-GPU pod joins 2-GPU pods", policy: gpu.PolicyGpuClustering, node: pairs8, demand: whole(2, 0),
			want: 81 * 10000}, // 75 + 25·2000/8000 = 75 + 6
		{name: "clustering, share on a mixed node holding shares", policy: gpu.PolicyGpuClustering, node: mixed8, demand: share(100, 0),
			want: 57 * 10000}, // 50 + 25·2300/8000 = 50 + 7
		{name: "clustering, idle node", policy: gpu.PolicyGpuClustering, node: idle8, demand: whole(1, 0),
			want: 25 * 10000}, // 25 + 0
		{name: "clustering, 1-GPU pod on a node of other classes", policy: gpu.PolicyGpuClustering, node: mixed8, demand: whole(1, 0),
			want: 7 * 10000}, // 0 + 25·2300/8000 = 7
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := gpu.MustPolicy(tt.policy, gpu.PolicyConfig{})
			req := gpu.Request{Demand: &tt.demand, Host: tt.host}
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

// TestReferenceChoose: the reference policies put a share on the fitting GPU
// with the least free milli-GPU, and whole GPUs on the lowest free ones.
func TestReferenceChoose(t *testing.T) {
	n := nodeWithPods(t, gt.MakeGPUNode("n").GFD("G2", 4, 0),
		gpu.Assignment{Devices: []int{0}, Milli: 200},
		gpu.Assignment{Devices: []int{1}, Milli: 600},
		gpu.Assignment{Devices: []int{2}, Milli: 1000})
	for _, policy := range []gpu.PolicyType{gpu.PolicyDotProd, gpu.PolicyGpuPacking, gpu.PolicyGpuClustering, gpu.PolicyBestFitCPUGPU} {
		p := gpu.MustPolicy(policy, gpu.PolicyConfig{})
		share := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 300}}
		if got, _ := p.Place(n, &share); got != 1<<1 {
			t.Errorf("%s: share of 300 on GPUs %b, want GPU 1 (400 free, the tightest fit)", policy, got)
		}
		whole := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}}
		if got, _ := p.Place(n, &whole); got != 1<<3 {
			t.Errorf("%s: whole GPU on %b, want GPU 3 (the only free one)", policy, got)
		}
	}
	// Random picks among the fitting GPUs (0, 1 and 3 fit 300 milli-GPU).
	p := gpu.MustPolicy(gpu.PolicyRandom, gpu.PolicyConfig{})
	share := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 300}}
	if got, _ := p.Place(n, &share); got.Len() != 1 || got.Has(2) {
		t.Errorf("random: share on GPUs %b, want one of GPUs 0, 1, 3", got)
	}
}

// TestRandomSpreads: Random's best node is spread over the nodes, not the
// same one every time.
func TestRandomSpreads(t *testing.T) {
	p := gpu.MustPolicy(gpu.PolicyRandom, gpu.PolicyConfig{})
	wins := map[int]int{}
	for cpu := range 200 {
		best, bestScore := -1, int64(-1)
		for i := range 10 {
			n := nodeWithPods(t, gt.MakeGPUNode(fmt.Sprintf("n%d", i)).GFD("T4", 2, 0))
			req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000, MilliCPU: int64(cpu)}, Host: knownHost(8000)}
			if s := p.Score(n, &req, 1); s > bestScore {
				best, bestScore = i, s
			}
		}
		wins[best]++
	}
	// 200 draws over 10 nodes: each should win about 20 times.
	for i := range 10 {
		if wins[i] < 5 || wins[i] > 45 {
			t.Errorf("node %d won %d of 200 draws, want about 20: %v", i, wins[i], wins)
		}
	}
}
