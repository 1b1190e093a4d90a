// Package nodehost is the host part of an engine request as gpusched's
// plugins read it from the scheduler's NodeInfo, for GPUPlacement and its
// DRA half alike.
package nodehost

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Of is the node's Host under the cluster's maxima: what is free there is
// its allocatable minus what the scheduler's NodeInfo counts as requested
// (the sum gpu.Free makes for the front ends that count pods themselves).
func Of(maxima gpu.Maxima, ni fwk.NodeInfo) gpu.Host {
	return maxima.Host(gpu.Free{
		MilliCPU:    ni.GetAllocatable().GetMilliCPU() - ni.GetRequested().GetMilliCPU(),
		MemoryBytes: ni.GetAllocatable().GetMemory() - ni.GetRequested().GetMemory(),
	})
}
