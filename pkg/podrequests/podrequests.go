// Package podrequests reads a pod's CPU and memory requests the way the
// scheduler computes them (k8s.io/component-helpers), for the front ends
// that hand them to host-aware policies. It sits outside pkg/gpu, which
// imports only k8s.io/api and apimachinery.
package podrequests

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// MilliCPU is the pod's CPU request in milli-CPU.
func MilliCPU(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Cpu().MilliValue()
}

// ScoredMilliCPU is the pod's CPU request as the scheduler scores it: a
// container without a CPU request counts as 100m.
func ScoredMilliCPU(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		NonMissingContainerRequests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(100, resource.DecimalSI)},
	})
	return requests.Cpu().MilliValue()
}

// MemoryMiB is the pod's memory request in MiB.
func MemoryMiB(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Memory().Value() >> 20
}

// FillHost sets the host part of a pod's demand: its scored CPU and its
// memory, which host-aware policies (gpu.HostPolicy) weigh.
func FillHost(d *gpu.Demand, pod *v1.Pod) {
	d.MilliCPU = ScoredMilliCPU(pod)
	d.HostMemoryMiB = MemoryMiB(pod)
}
