package gpu

import (
	v1 "k8s.io/api/core/v1"
)

// The host half of a request (Host), one rule for every front end: what is
// free on a node, and the cluster's largest capacities host-aware policies
// normalize by. The plugin reads a node's sum from the scheduler's NodeInfo;
// the extender, what-if, gpuview and the simulator sum the pods themselves
// with Free, and all of them fold their nodes into Maxima.

// Free is a node's free CPU (milli-CPU) and memory (bytes): its allocatable
// minus what the pods that hold it request (RequestsOnNode). Memory stays in
// bytes until Host rounds the total down to MiB, so that pods asking for
// parts of a MiB count as the scheduler counts them.
type Free struct {
	MilliCPU    int64
	MemoryBytes int64
}

// AllocatableOf is a node's allocatable CPU and memory, nothing taken yet.
func AllocatableOf(node *v1.Node) Free {
	alloc := node.Status.Allocatable
	return Free{MilliCPU: alloc.Cpu().MilliValue(), MemoryBytes: alloc.Memory().Value()}
}

// FreeOn is what is free on node with pods bound there: every pod that
// holds the node (HoldsNode) is taken.
func FreeOn(node *v1.Node, pods []*v1.Pod) Free {
	f := AllocatableOf(node)
	for _, pod := range pods {
		if HoldsNode(pod) {
			f.Take(pod)
		}
	}
	return f
}

// HoldsNode reports whether a pod bound to a node counts against its CPU
// and memory: it has not succeeded or failed (the scheduler's cache drops
// terminated pods). A pod being deleted holds its node until it is gone.
func HoldsNode(pod *v1.Pod) bool { return !isTerminated(pod) }

// Take subtracts the pod's requests on its node (RequestsOnNode).
func (f *Free) Take(pod *v1.Pod) {
	cpu, memory := PodRequests(pod)
	f.MilliCPU -= cpu
	f.MemoryBytes -= memory
}

// Give adds back what Take subtracted.
func (f *Free) Give(pod *v1.Pod) {
	cpu, memory := PodRequests(pod)
	f.MilliCPU += cpu
	f.MemoryBytes += memory
}

// MemoryMiB is the free memory in whole MiB, rounded down (toward minus
// infinity on an overcommitted node).
func (f Free) MemoryMiB() int64 { return f.MemoryBytes >> 20 }

// Maxima are the cluster's largest node capacities, which a host-aware
// policy divides a node's free CPU and GPUs by (Host.MaxMilliCPU,
// Host.MaxGPUs). Every node the front end knows is included, schedulable or
// not and whatever its GPUs' health, with its allocatable CPU and the GPUs
// gpusched sees there: its inventory, or the devices its DRA driver
// publishes (where the front end reads DRA: the defragmenter does not), and
// none when neither can be read. They are capacities, not what is free, so
// a pod binding changes no other node's score.
type Maxima struct {
	MilliCPU int64
	GPUs     int
}

// Include folds one node's capacities into m.
func (m *Maxima) Include(allocatableMilliCPU int64, gpus int) {
	m.MilliCPU = max(m.MilliCPU, allocatableMilliCPU)
	m.GPUs = max(m.GPUs, gpus)
}

// IncludeNode folds in a node whose GPUs gpusched assigns: its allocatable
// CPU and its inventory (InventoryFromNode; none when unreadable).
func (m *Maxima) IncludeNode(node *v1.Node) {
	gpus := 0
	if inv, err := InventoryFromNode(node); err == nil {
		gpus = inv.Len()
	}
	m.Include(node.Status.Allocatable.Cpu().MilliValue(), gpus)
}

// Host is the Host of a node with f free, under the maxima m (the zero
// Maxima leaves the policy to take the node's own capacities).
func (m Maxima) Host(f Free) Host {
	return Host{Known: true, FreeMilliCPU: f.MilliCPU, FreeMemoryMiB: f.MemoryMiB(), MaxMilliCPU: m.MilliCPU, MaxGPUs: m.GPUs}
}
