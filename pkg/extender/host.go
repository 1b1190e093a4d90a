package extender

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The node's CPU and memory, which host-aware policies weigh
// (gpu.PolicyInfo.HostAware), read from the extender's own view as the
// GPUPlacement plugin reads them from the scheduler's NodeInfo: the node's
// allocatable minus the requests of its pods, with the largest CPU and GPU
// capacities of any node of the cluster to normalize by. So the extender
// decides exactly as the plugin does.

// requested is the sum of the requests of a node's pods.
type requested struct {
	milliCPU, memoryBytes int64
}

// requestedOf returns the sum of the requests of the state's running pods,
// memoized in the state (immutable but for its memos).
func (s *NodeState) requestedOf() requested {
	if r := s.requested.Load(); r != nil {
		return *r
	}
	var r requested
	for _, pod := range s.Pods {
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue // the scheduler's cache drops terminated pods
		}
		cpu, mem := gpu.PodRequests(pod)
		r.milliCPU += cpu
		r.memoryBytes += mem
	}
	s.requested.Store(&r)
	return r
}

// hostOf is the node's CPU and memory as the plugin's hostOf computes them;
// the zero (unknown) Host for a state without a Node.
func hostOf(s *NodeState, m maxima) gpu.Host {
	if s == nil || s.Node == nil {
		return gpu.Host{}
	}
	r := s.requestedOf()
	return gpu.Host{
		Known:         true,
		FreeMilliCPU:  s.capacity.milliCPU - r.milliCPU,
		FreeMemoryMiB: (s.capacity.memoryBytes - r.memoryBytes) >> 20,
		MaxMilliCPU:   m.milliCPU,
		MaxGPUs:       m.gpus,
	}
}

// capacity is a node's allocatable CPU and memory and its number of GPUs
// (0 when its inventory cannot be read).
type capacity struct {
	milliCPU    int64
	memoryBytes int64
	gpus        int
}

func capacityOf(node *v1.Node) capacity {
	alloc := node.Status.Allocatable
	c := capacity{milliCPU: alloc.Cpu().MilliValue(), memoryBytes: alloc.Memory().Value()}
	if inv, err := gpu.InventoryFromNode(node); err == nil {
		c.gpus = inv.Len()
	}
	return c
}

// maxima are the largest allocatable CPU and the most GPUs of any node.
type maxima struct {
	milliCPU int64
	gpus     int
	// nodes is the Cluster's nodeChanges they were computed at.
	nodes int64
}

// maxima returns the cluster's largest node capacities, recomputed only
// after a Node object changed.
func (c *Cluster) maxima() maxima {
	changes := c.nodeChanges.Load()
	if m := c.maximaMemo.Load(); m != nil && m.nodes == changes {
		return *m
	}
	c.mu.RLock()
	m := maxima{nodes: changes}
	for _, s := range c.nodes {
		m.milliCPU = max(m.milliCPU, s.capacity.milliCPU)
		m.gpus = max(m.gpus, s.capacity.gpus)
	}
	c.mu.RUnlock()
	c.maximaMemo.Store(&m)
	return m
}
