package gpu

import (
	"cmp"
	"slices"
	"strings"
)

// TypicalPod is one shape of pod that makes up most of a workload, with its
// share of the workload. The fragmentation measure of the FGD paper asks, for
// each typical pod, which free GPU capacity of a node it could not use.
type TypicalPod struct {
	Demand Demand
	// Weight is the pod shape's frequency among the typical pods; the
	// weights of a set sum to 1.
	Weight float64
}

// TypicalCoverage is the share of a workload its typical pods cover: the
// most frequent shapes are taken until they account for 95% of the pods.
const TypicalCoverage = 0.95

// TypicalPods groups demands by shape (CPU request, GPU count, milli-GPU per
// GPU, allowed models), takes the most frequent shapes until they cover
// TypicalCoverage of the demands, and weighs each by its frequency among
// those taken. Ties in frequency go to the larger shape, compared by CPU,
// then milli-GPU, then count, then models. Demands should carry MilliCPU.
func TypicalPods(demands []Demand) []TypicalPod {
	type shape struct {
		cpu, milli int64
		count      int
		models     string
	}
	counts := map[shape]int{}
	examples := map[shape]Demand{}
	for _, d := range demands {
		s := shape{d.MilliCPU, d.Milli, d.Count, strings.Join(d.Models, "|")}
		if d.IsZero() {
			s.milli = 0
		}
		counts[s]++
		if _, ok := examples[s]; !ok {
			examples[s] = d
		}
	}
	shapes := make([]shape, 0, len(counts))
	for s := range counts {
		shapes = append(shapes, s)
	}
	slices.SortFunc(shapes, func(a, b shape) int {
		return cmp.Or(
			cmp.Compare(counts[b], counts[a]),
			cmp.Compare(b.cpu, a.cpu), cmp.Compare(b.milli, a.milli),
			cmp.Compare(b.count, a.count), cmp.Compare(b.models, a.models))
	})
	var typical []TypicalPod
	covered := 0
	for _, s := range shapes {
		if float64(covered) >= TypicalCoverage*float64(len(demands)) {
			break
		}
		typical = append(typical, TypicalPod{Demand: examples[s], Weight: float64(counts[s])})
		covered += counts[s]
	}
	for i := range typical {
		typical[i].Weight /= float64(covered)
	}
	return typical
}

// Fragment is the node's expected unusable GPU capacity in milli-GPU: Σ over
// the typical pods of weight × the free milli-GPU that pod could not use.
// A pod that needs no GPU, may not run on the node's model, or does not fit
// (too little free CPU, too few GPUs with the free milli-GPU it needs) could
// use none of it; a pod that fits could not use the GPUs whose free part is
// smaller than its milli-GPU.
func (n *NodeGPUs) Fragment(freeMilliCPU int64, typical []TypicalPod) float64 {
	free := n.FreeMilliTotal()
	if free == 0 {
		return 0
	}
	var f float64
	for i := range typical {
		f += typical[i].Weight * float64(n.fragmentFor(freeMilliCPU, &typical[i].Demand, free))
	}
	return f
}

// fragmentFor is the free milli-GPU one pod shape could not use on the node.
func (n *NodeGPUs) fragmentFor(freeMilliCPU int64, d *Demand, free int64) int64 {
	if d.IsZero() || d.MilliCPU > freeMilliCPU || !n.allowsAny(d) {
		return free
	}
	var fitting int
	var small int64
	for i := range n.Used {
		fm := n.FreeMilli(i)
		if fm >= d.Milli && d.AllowsModel(n.Inventory.Devices[i].Model) {
			fitting++
		} else {
			small += fm
		}
	}
	if fitting < d.Count {
		return free
	}
	return small
}

// allowsAny reports whether the demand allows a model of the node.
func (n *NodeGPUs) allowsAny(d *Demand) bool {
	if len(d.Models) == 0 {
		return true
	}
	for i := range n.Inventory.Devices {
		if d.AllowsModel(n.Inventory.Devices[i].Model) {
			return true
		}
	}
	return false
}
