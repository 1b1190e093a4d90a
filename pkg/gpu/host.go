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

// PodRequests is the pod's CPU (milli-CPU) and memory (bytes) as the
// scheduler sums them on a node (RequestsOnNode).
func PodRequests(pod *v1.Pod) (milliCPU, memoryBytes int64) {
	requests := RequestsOnNode(pod)
	return requests.Cpu().MilliValue(), requests.Memory().Value()
}

// RequestsOnNode is what a pod takes of its node's resources as the
// scheduler's NodeInfo sums them (PodInfo.CalculateResource, Kubernetes
// 1.37): its requests, and for a pod resized in place the larger of each
// container's spec and status. It is the one rule for every front end that
// sums a node's pods itself (the extender, what-if, gpuview); the plugin
// reads the scheduler's own sum. A pod whose status reports no resources
// counts with its spec, which is what that computation gives it, computed
// more cheaply.
func RequestsOnNode(pod *v1.Pod) v1.ResourceList {
	if !hasStatusResources(pod) {
		return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	}
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		UseStatusResources: true,
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	})
}

// hasStatusResources reports whether the pod's status says anything about
// its resources: resources allocated or actuated, for the pod or a
// container, or a resize found infeasible.
func hasStatusResources(pod *v1.Pod) bool {
	st := &pod.Status
	if st.Resources != nil || st.AllocatedResources != nil || resourcehelper.IsPodResizeInfeasible(pod) {
		return true
	}
	for _, statuses := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range statuses {
			if statuses[i].AllocatedResources != nil || statuses[i].Resources != nil {
				return true
			}
		}
	}
	return false
}
