package gpu

import (
	"cmp"
	"math"
	"slices"

	v1 "k8s.io/api/core/v1"
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

// InWorkload says whether pod is part of the workload now: it has not
// succeeded or failed, and it is not a pending pod being deleted, which
// will never run. A bound pod being deleted still holds its node until it
// is gone.
func InWorkload(pod *v1.Pod) bool {
	switch {
	case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		return false
	case pod.DeletionTimestamp != nil && pod.Spec.NodeName == "":
		return false
	}
	return true
}

// ShapeOf is pod's shape among the typical pods (TypicalPods): its demand
// with its CPU and memory (FillHost), CPU-only pods included, since a pod
// without GPUs takes the CPU a GPU pod needs beside its GPUs. ok is false
// for a malformed demand, which the front end reports where it places the
// pod. The simulator takes the shape of every pod of its trace (a trace
// pod's deletion time is when it leaves, not a sign it never runs).
func ShapeOf(pod *v1.Pod) (Demand, bool) {
	d, err := DemandFromPod(pod)
	if err != nil {
		return Demand{}, false
	}
	d.FillHost(pod)
	return d, true
}

// WorkloadDemand is what pod of a live cluster adds to the workload whose
// typical pods weigh fragmentation: its shape (ShapeOf) if it is in the
// workload now (InWorkload). It is the one rule of which pods of a cluster
// are typical for the front ends that read a cluster's pods, what-if and
// gpuview (kubectl gpusched, the dashboard); the plugin and the extender
// observe each pod they place (Policy.Observe), CPU-only pods as well.
func WorkloadDemand(pod *v1.Pod) (Demand, bool) {
	if !InWorkload(pod) {
		return Demand{}, false
	}
	return ShapeOf(pod)
}

// TypicalPods groups demands by shape (CPU request, GPU count, milli-GPU per
// GPU, allowed models), takes the most frequent shapes until they cover
// TypicalCoverage of the demands, and weighs each by its frequency among
// those taken. Ties in frequency go to the larger shape, compared by CPU,
// then milli-GPU, then count, then models. Demands should carry MilliCPU.
func TypicalPods(demands []Demand) []TypicalPod {
	counts := map[shapeKey]float64{}
	examples := map[shapeKey]Demand{}
	for _, d := range demands {
		k := keyOf(&d)
		counts[k]++
		if _, ok := examples[k]; !ok {
			examples[k] = d
		}
	}
	weighted := make([]TypicalPod, 0, len(counts))
	for k, c := range counts {
		weighted = append(weighted, TypicalPod{Demand: examples[k], Weight: c})
	}
	return topShapes(weighted, float64(len(demands)))
}

// topShapes sorts shapes by weight, heaviest first (ties to the larger
// shape: CPU, then milli-GPU, then count, then models), keeps them until
// they cover TypicalCoverage of total, and renormalizes their weights.
func topShapes(shapes []TypicalPod, total float64) []TypicalPod {
	sortShapes(shapes)
	var covered float64
	n := 0
	for n < len(shapes) && covered < TypicalCoverage*total {
		covered += shapes[n].Weight
		n++
	}
	typical := shapes[:n:n]
	for i := range typical {
		typical[i].Weight /= covered
	}
	return typical
}

// sortShapes sorts shapes by weight, heaviest first, ties to the larger
// shape: CPU, then milli-GPU, then count, then models. Shapes have
// distinct keys, so the order is total.
func sortShapes(shapes []TypicalPod) {
	slices.SortFunc(shapes, func(a, b TypicalPod) int {
		ka, kb := keyOf(&a.Demand), keyOf(&b.Demand)
		return cmp.Or(
			cmp.Compare(b.Weight, a.Weight),
			cmp.Compare(kb.MilliCPU, ka.MilliCPU), cmp.Compare(kb.Milli, ka.Milli),
			cmp.Compare(kb.Count, ka.Count), cmp.Compare(kb.Models, ka.Models))
	})
}

// Fragment is the node's expected unusable GPU capacity in milli-GPU: Σ over
// the typical pods of weight × the free milli-GPU that pod could not use.
// A pod that needs no GPU, may not run on the node's model, or does not fit
// (too little free CPU, too few GPUs with the free milli-GPU it needs) could
// use none of it; a pod that fits could not use the GPUs whose free part is
// smaller than its milli-GPU.
func (n *NodeGPUs) Fragment(freeMilliCPU int64, typical []TypicalPod) float64 {
	var free [MaxDevicesPerNode]int64
	for i := range n.Used {
		free[i] = n.FreeMilli(i)
	}
	return n.fragmentOf(free[:n.Len()], hostFree{freeMilliCPU, unlimited}, typical)
}

// FragmentWithMemory is Fragment where a typical pod also needs its host
// memory (Demand.HostMemoryMiB) among the node's free memory.
func (n *NodeGPUs) FragmentWithMemory(freeMilliCPU, freeMemoryMiB int64, typical []TypicalPod) float64 {
	free := freeOf(n)
	return n.fragmentOf(free[:n.Len()], hostFree{freeMilliCPU, freeMemoryMiB}, typical)
}

// hostFree is a node's free CPU and host memory, as far as typical pods are
// checked against them.
type hostFree struct{ milliCPU, memoryMiB int64 }

// takes reports whether d's CPU and memory fit hf.
func (hf hostFree) takes(d *Demand) bool {
	return d.MilliCPU <= hf.milliCPU && d.HostMemoryMiB <= hf.memoryMiB
}

// unlimited stands for a resource that is not checked.
const unlimited = math.MaxInt64 / 4

// fragmentOf is Fragment for the node's GPUs with the given free milli-GPU.
func (n *NodeGPUs) fragmentOf(free []int64, hf hostFree, typical []TypicalPod) float64 {
	var total int64
	for _, f := range free {
		total += f
	}
	if total == 0 {
		return 0
	}
	var sum float64
	for i := range typical {
		sum += typical[i].Weight * float64(n.fragmentFor(free, hf, &typical[i].Demand, total))
	}
	return sum
}

// fragmentFor is the free milli-GPU one pod shape could not use on the node.
func (n *NodeGPUs) fragmentFor(free []int64, hf hostFree, d *Demand, total int64) int64 {
	if d.IsZero() || !hf.takes(d) || !n.allowsAny(d) {
		return total
	}
	var fitting int
	var small int64
	for i, fm := range free {
		if fm >= d.Milli && (len(d.Models) == 0 || d.AllowsModel(n.Inventory.Devices[i].Model)) {
			fitting++
		} else {
			small += fm
		}
	}
	if fitting < d.Count {
		return total
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
