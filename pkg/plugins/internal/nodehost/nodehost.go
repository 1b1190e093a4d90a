// Package nodehost is the host part of an engine request as gpusched's
// plugins read it from the scheduler's NodeInfo, for GPUPlacement and its
// DRA half alike.
package nodehost

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Of is the node's free CPU and memory (its allocatable minus what the
// scheduler's NodeInfo counts as requested) with the cluster's maxima.
func Of(maxima gpu.Host, ni fwk.NodeInfo) gpu.Host {
	host := maxima
	host.FreeMilliCPU = ni.GetAllocatable().GetMilliCPU() - ni.GetRequested().GetMilliCPU()
	host.FreeMemoryMiB = (ni.GetAllocatable().GetMemory() - ni.GetRequested().GetMemory()) >> 20
	host.Known = true
	return host
}
