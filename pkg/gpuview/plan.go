package gpuview

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// PlanNodes is the cluster as the migration planner (gpu.Planner) sees it:
// every node whose GPUs gpusched assigns (not DRA's), with its view, its
// free CPU and memory and the cluster's largest capacities, and the pods
// bound there that hold its GPUs or use its CPU, each with its demand as
// policy reads it (gpu.PlanDemand) and movable's verdict. Pods whose demand
// cannot be read are left out: they stay where they are.
func (s *Snapshot) PlanNodes(policy *gpu.Policy, movable func(*v1.Pod) bool) []gpu.PlanNode {
	byNode := map[string]int{}
	var out []gpu.PlanNode
	for i := range s.Nodes {
		node := &s.Nodes[i]
		if s.draNodes[i] || s.views[i].Err != nil {
			continue
		}
		byNode[node.Name] = len(out)
		out = append(out, gpu.PlanNode{GPUs: s.views[i], Host: s.maxima.Host(s.free[i])})
	}
	for _, p := range s.pods {
		k, on := byNode[p.Spec.NodeName]
		if !on || !gpu.InWorkload(p) || p.DeletionTimestamp != nil {
			continue
		}
		a, held := gpu.AssignmentOf(p)
		d, err := gpu.PlanDemand(policy, p)
		if err != nil || (!held && !d.IsZero()) {
			continue // its GPUs are not known: it stays
		}
		out[k].Pods = append(out[k].Pods, gpu.PlanPod{ID: string(p.UID), Demand: d, Held: a,
			Priority: priorityOf(p), Movable: movable(p)})
	}
	for k := range out {
		slices.SortFunc(out[k].Pods, func(a, b gpu.PlanPod) int { return cmp.Compare(a.ID, b.ID) })
	}
	return out
}

// NodeObject returns the named node's object; nil when the snapshot has
// no such node.
func (s *Snapshot) NodeObject(name string) *v1.Node {
	i, ok := s.byName[name]
	if !ok {
		return nil
	}
	return s.nodes[i]
}

// Pod returns the snapshot's pod with uid; nil when it has none.
func (s *Snapshot) Pod(uid string) *v1.Pod {
	s.byUIDOnce.Do(func() {
		s.byUID = make(map[string]*v1.Pod, len(s.pods))
		for _, p := range s.pods {
			s.byUID[string(p.UID)] = p
		}
	})
	return s.byUID[uid]
}

// Policy builds policy t as the scheduler would place with on this
// cluster: measuring fragmentation against the snapshot's typical pods
// (gpu.StaticShapes), and pricing models by the nodes' GPUs.
func (s *Snapshot) Policy(t gpu.PolicyType) (*gpu.Policy, error) {
	return gpu.NewWorkloadPolicy(t, s.Typical, s.fleet)
}
