package trace

import (
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
)

// SyntheticOptions sizes the built-in cluster and workload.
type SyntheticOptions struct {
	// Nodes is the number of nodes; 0 means 120.
	Nodes int
	// Load is the workload's GPU request as a fraction of the cluster's GPU
	// capacity; 0 means 1.0.
	Load float64
	// Seed makes a different but equally shaped cluster and workload.
	Seed uint64
}

// nodeShape is a kind of node and its share of the cluster.
type nodeShape struct {
	weight    int
	milliCPU  int64
	memoryMiB int64
	gpus      int
	model     string
}

// syntheticNodes mirrors the mix of the public Alibaba GPU cluster: mostly
// 8-GPU and 2-GPU machines, a few 4- and 1-GPU ones, several models.
var syntheticNodes = []nodeShape{
	{45, 96000, 393216, 8, "G2"},
	{32, 104000, 524288, 2, "T4"},
	{9, 16000, 122880, 2, "P100"},
	{4, 128000, 786432, 8, "G3"},
	{3, 32000, 131072, 4, "V100M16"},
	{3, 96000, 786432, 8, "V100M32"},
	{2, 64000, 262144, 2, "P100"},
	{2, 8000, 32768, 1, "V100M16"},
}

// podShape is a kind of pod and its share of the workload.
type podShape struct {
	weight   int
	numGPU   int
	gpuMilli int64
}

// syntheticPods mirrors the trace's demand: half the pods take one whole
// GPU, a third share one GPU in sizes from 50 to 900 milli-GPU, an eighth
// need no GPU, and a few take 2, 4 or 8 GPUs.
var syntheticPods = []podShape{
	{480, 1, 1000}, {130, 0, 0},
	{130, 1, 810}, {90, 1, 470}, {40, 1, 320}, {30, 1, 650}, {17, 1, 230}, {16, 1, 460},
	{10, 1, 590}, {9, 1, 160}, {9, 1, 550}, {8, 1, 220}, {6, 1, 370}, {3, 1, 110}, {1, 1, 50},
	{6, 8, 1000}, {2, 2, 1000}, {2, 4, 1000},
}

// syntheticCPU is the CPU requests of the trace's pods, most common first.
var syntheticCPU = []int64{3152, 11300, 8000, 11908, 4000, 11400, 12500, 12000, 32000, 18708, 6000, 1000}

// Synthetic generates a cluster and a workload shaped like the public
// Alibaba GPU trace, from a seed: nothing is downloaded. Pods carry creation
// and deletion times (Poisson arrivals, exponential run times), so both
// arrival modes work.
func Synthetic(o SyntheticOptions) ([]*v1.Node, []Pod) {
	if o.Nodes <= 0 {
		o.Nodes = 120
	}
	if o.Load <= 0 {
		o.Load = 1.0
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6770757363686564))
	nodes := make([]*v1.Node, o.Nodes)
	var capacity int64
	for i := range nodes {
		s := pick(rng, syntheticNodes, func(s nodeShape) int { return s.weight })
		nodes[i] = NewNode(fmt.Sprintf("sim-node-%04d", i), s.milliCPU, s.memoryMiB, s.gpus, s.model)
		capacity += int64(s.gpus) * 1000
	}
	var pods []Pod
	var requested, now int64
	for i := 0; float64(requested) < o.Load*float64(capacity); i++ {
		s := pick(rng, syntheticPods, func(s podShape) int { return s.weight })
		cpu := syntheticCPU[min(len(syntheticCPU)-1, int(rng.ExpFloat64()*3))]
		pod := NewPod(fmt.Sprintf("sim-pod-%05d", i), cpu, cpu/1000*2048, s.numGPU, s.gpuMilli, nil)
		now += int64(rng.ExpFloat64() * 60)
		run := int64(rng.ExpFloat64() * 4 * 3600)
		pods = append(pods, Pod{Pod: pod, Created: now, Deleted: now + run, HasTimes: true})
		requested += int64(s.numGPU) * s.gpuMilli
	}
	return nodes, pods
}

func pick[T any](rng *rand.Rand, choices []T, weight func(T) int) T {
	total := 0
	for _, c := range choices {
		total += weight(c)
	}
	r := rng.IntN(total)
	for _, c := range choices {
		if r -= weight(c); r < 0 {
			return c
		}
	}
	return choices[len(choices)-1]
}
