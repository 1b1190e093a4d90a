package extender

import (
	"github.com/gpusched/gpusched/pkg/gpu"
)

// The node's CPU and memory, which host-aware policies weigh
// (gpu.PolicyInfo.HostAware), read from the extender's own view by the
// engine's rule (gpu.Free, gpu.Maxima) as the GPUPlacement plugin reads
// them from the scheduler's NodeInfo: the node's allocatable minus the
// requests of its pods, with the largest CPU and GPU capacities of any node
// of the cluster to normalize by. So the extender decides exactly as the
// plugin does.

// freeOf returns what is free on the state's node (gpu.FreeOn), memoized in
// the state (immutable but for its memos). The state must have a Node.
func (s *NodeState) freeOf() gpu.Free {
	if f := s.free.Load(); f != nil {
		return *f
	}
	f := gpu.FreeOn(s.Node, s.Pods)
	s.free.Store(&f)
	return f
}

// hostOf is the node's CPU and memory as the plugin's hostOf computes them;
// the zero (unknown) Host for a state without a Node.
func hostOf(s *NodeState, m maxima) gpu.Host {
	if s == nil || s.Node == nil {
		return gpu.Host{}
	}
	return m.Maxima.Host(s.freeOf())
}

// maxima are the largest allocatable CPU and the most GPUs of any node.
type maxima struct {
	gpu.Maxima
	// nodes is the Cluster's nodeChanges they were computed at.
	nodes int64
}

// maxima returns the cluster's largest node capacities, with the GPUs a
// DRA driver publishes (gpu.Maxima), recomputed only after a Node object
// or a ResourceSlice changed.
func (c *Cluster) maxima() maxima {
	changes := c.nodeChanges.Load()
	if m := c.maximaMemo.Load(); m != nil && m.nodes == changes {
		return *m
	}
	c.mu.RLock()
	m := maxima{nodes: changes}
	for _, s := range c.nodes {
		m.Include(s.capacity.MilliCPU, s.capacity.GPUs)
	}
	c.mu.RUnlock()
	if c.dra != nil {
		m.Include(0, c.dra.maxGPUs()) // the GPUs DRA nodes publish, as GPUPlacement counts them
	}
	c.maximaMemo.Store(&m)
	return m
}
