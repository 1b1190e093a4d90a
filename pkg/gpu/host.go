package gpu

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The host part of a demand: a pod's CPU and memory requests, computed the
// way the scheduler computes them (k8s.io/component-helpers, which imports
// only k8s.io/api, apimachinery and utils). Host-aware policies weigh them.

// FillHost sets the host part of d from the pod: its CPU request as the
// scheduler scores it (a container without a CPU request counts as 100m)
// and its memory request.
func (d *Demand) FillHost(pod *v1.Pod) {
	// One pass: the CPU default for containers without a request leaves
	// the memory sum unchanged.
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		NonMissingContainerRequests: defaultScoredCPU,
	})
	d.MilliCPU = requests.Cpu().MilliValue()
	d.HostMemoryMiB = requests.Memory().Value() >> 20
}

// PodMilliCPU is the pod's CPU request in milli-CPU.
func PodMilliCPU(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Cpu().MilliValue()
}

// PodMemoryMiB is the pod's memory request in MiB.
func PodMemoryMiB(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Memory().Value() >> 20
}

// defaultScoredCPU is what the scheduler's scoring counts for a container
// without a CPU request.
var defaultScoredCPU = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(100, resource.DecimalSI)}

// PodRequests is the pod's CPU (milli-CPU) and memory (bytes) requests as
// the scheduler sums them on a node (its NodeInfo's requested resources).
func PodRequests(pod *v1.Pod) (milliCPU, memoryBytes int64) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Cpu().MilliValue(), requests.Memory().Value()
}
