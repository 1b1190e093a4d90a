package gpu

import (
	"cmp"
	"slices"
)

// PendingPod is one of the pods MakeRoomForAll makes room for.
type PendingPod struct {
	// ID names the pod to the front end (its UID): Planner.Admits is asked
	// about it, and the plans are returned in the order of the pods.
	ID     string
	Demand Demand
}

// MakeRoomForAll finds plans after which every one of pending fits a node
// at the same time, moving at most MaxMoves pods in all: the room a gang
// needs, whose pods run together or not at all. ok is false when some pod
// finds no room within the moves left. plans[i] is pending[i]'s; a pod that
// fits somewhere as the plans before it leave the cluster has a plan
// without moves.
//
// The pods are taken largest first (milli-GPU in all). Each goes where
// Policy scores it highest on the cluster as the plans before it leave it,
// when it fits somewhere; otherwise MakeRoom plans for it on that cluster,
// with the moves left. A pod moved by one plan is not moved again by a
// later one, and no plan moves a pending pod already placed, so the plans
// hold together: after all of them, every pending pod and every moved pod
// fits where its plan puts it, no GPU past its capacity and no node past
// its free CPU or memory.
//
// A pod moved for one pending pod may land on the node another needed.
// When a pod finds no room, the search starts again with the pods moved
// kept off the nodes where pods moved so far landed and where that pod
// could have been made room on before any move: at most maxPlanPasses
// passes in all. It is still greedy: plans may exist that it does not
// find.
func (p *Planner) MakeRoomForAll(nodes []PlanNode, pending []PendingPod, priority int32) (plans []Plan, ok bool) {
	order := make([]int, len(pending))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(pending[b].Demand.TotalMilli(), pending[a].Demand.TotalMilli())
	})
	if len(pending) == 0 {
		return nil, true
	}
	avoid := map[int]bool{}
	for range min(len(pending), maxPlanPasses) {
		plans, failed, landed := p.placeAll(nodes, pending, order, priority, avoid)
		if failed < 0 {
			return plans, true
		}
		grew := false
		for _, c := range p.candidates(nodes, pending[failed].ID, &pending[failed].Demand, priority) {
			if landed[c.node] && !avoid[c.node] {
				avoid[c.node], grew = true, true
			}
		}
		if !grew {
			break
		}
	}
	return nil, false
}

// maxPlanPasses bounds MakeRoomForAll's passes over the pending pods: each
// costs a scan of every node per pod (about 60 ms for four pods on 1,213
// nodes, docs/benchmarks.md), and a pass that fails once more mostly fails
// again.
const maxPlanPasses = 3

// placeAll is one greedy pass of MakeRoomForAll over pending in order,
// moved pods kept off the nodes of avoid: the plans, or the index of the
// pod that found no room (failed; -1 when all did) and the nodes where the
// pods moved before it landed.
func (p *Planner) placeAll(nodes []PlanNode, pending []PendingPod, order []int, priority int32, avoid map[int]bool) (plans []Plan, failed int, landed map[int]bool) {
	left := max(1, p.MaxMoves)
	at := make(map[string]int, len(nodes))
	for i := range nodes {
		if nodes[i].GPUs != nil {
			at[nodes[i].GPUs.Name] = i
		}
	}
	cluster := slices.Clone(nodes) // each node's GPUs, host and pods as the plans so far leave them
	plans, landed = make([]Plan, len(pending)), map[int]bool{}
	for _, i := range order {
		pod := &pending[i]
		plan, fits := p.placeAsIs(cluster, pod)
		if !fits {
			if left < 1 {
				return nil, i, landed
			}
			q := *p
			q.MaxMoves = left
			if plan, fits = q.makeRoom(cluster, pod.ID, &pod.Demand, priority, avoid); !fits {
				return nil, i, landed
			}
			left -= len(plan.Moves)
			for _, mv := range plan.Moves {
				landed[at[mv.To.Node]] = true
			}
		}
		plans[i] = plan
		apply(cluster, at, &plan, pod, priority)
	}
	return plans, -1, landed
}

// placeAsIs is a plan without moves for pod: the node Policy scores
// highest among those it fits and that admit it; fits is false when none.
func (p *Planner) placeAsIs(nodes []PlanNode, pod *PendingPod) (plan Plan, fits bool) {
	bestScore := int64(-1)
	for i := range nodes {
		n := &nodes[i]
		if n.GPUs == nil || n.GPUs.Inventory == nil || !hostFits(n.Host, &pod.Demand) || !p.admits(n.GPUs.Name, pod.ID) {
			continue
		}
		chosen, fit, score := p.Policy.PlaceAndScore(n.GPUs, &Request{Demand: &pod.Demand, Host: n.Host})
		if fit.OK() && score > bestScore {
			bestScore = score
			plan = Plan{Node: n.GPUs.Name, Assignment: NewAssignment(n.GPUs, &pod.Demand, chosen)}
		}
	}
	return plan, bestScore >= 0
}

// apply changes nodes (indexed by name in at) as plan does: its moved pods
// leave its node for their destinations, and pod takes its GPUs. The
// moved pods and pod stay where they are put: none of them is movable any
// more.
func apply(nodes []PlanNode, at map[string]int, plan *Plan, pod *PendingPod, priority int32) {
	t := at[plan.Node]
	n := &nodes[t]
	pods := slices.Clone(n.Pods)
	for _, mv := range plan.Moves {
		k := slices.IndexFunc(pods, func(q PlanPod) bool { return q.ID == mv.Pod })
		if k < 0 {
			continue
		}
		moved := pods[k]
		pods = slices.Delete(pods, k, k+1)
		if len(moved.Held.Devices) > 0 {
			n.GPUs = n.GPUs.Without(&moved.Held)
		}
		n.Host = freed(n.Host, []PlanPod{moved}, 1)
		d := &nodes[at[mv.To.Node]]
		if !moved.Demand.IsZero() {
			d.GPUs = d.GPUs.With(&mv.To)
		}
		d.Host = freed(d.Host, []PlanPod{moved}, -1)
		moved.Held, moved.Movable = mv.To, false
		d.Pods = append(slices.Clone(d.Pods), moved)
	}
	n.GPUs = n.GPUs.With(&plan.Assignment)
	placed := PlanPod{ID: pod.ID, Demand: pod.Demand, Held: plan.Assignment, Priority: priority}
	n.Host = freed(n.Host, []PlanPod{placed}, -1)
	n.Pods = append(pods, placed)
}
