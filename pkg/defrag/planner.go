package defrag

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// noPlan says why no plan was found; blocked when PodDisruptionBudgets
// are what stand in the way.
type noPlan struct {
	text    string
	blocked bool
}

// cluster is the cluster as one round plans on it: the snapshot, the
// policy, the rules, and the nodes as the planner sees them, read once for
// all the pods the round plans for.
type cluster struct {
	snap   *gpuview.Snapshot
	policy *gpu.Policy
	rules  *Rules
	// within says whether moving a pod keeps within the rate limits.
	within func(*v1.Pod) bool
	// nodes are the planner's nodes with the pods rules and within let
	// move; relaxed the same with the disruption budgets left out. Built
	// on first use.
	nodes, relaxed []gpu.PlanNode
}

func newCluster(snap *gpuview.Snapshot, policy *gpu.Policy, rules *Rules, within func(*v1.Pod) bool) *cluster {
	return &cluster{snap: snap, policy: policy, rules: rules, within: within}
}

// plan is the plan that makes room for pod, moving at most maxMoves pods
// (and gpu.MaxMoves of its demand) that the rules and the rate limits let
// move, each only to a node that admits it (admits); a plan without moves
// when it fits as the cluster is. Without one, why says why, naming the
// disruption budgets when a plan exists were they to allow it. why is nil
// for a pod that asks for no GPU.
func (c *cluster) plan(pod *v1.Pod, maxMoves int) (plan gpu.Plan, ok bool, why *noPlan) {
	demand, err := gpu.PlanDemand(c.policy, pod)
	if err != nil || demand.IsZero() {
		return gpu.Plan{}, false, nil
	}
	moves := min(gpu.MaxMoves(&demand), maxMoves)
	if moves < 1 {
		return gpu.Plan{}, false, &noPlan{text: fmt.Sprintf("no migration plan makes room for this pod: it asks for %s, for which no pod is moved (%d moves per GPU)", demand.String(), gpu.MovesPerGPU)}
	}
	// MakeRoomForAll, not MakeRoom: a pod that fits as the cluster is now
	// (the scheduler has not tried it since) gets a plan without moves.
	plans, ok, why := c.search(moves, "this pod", func(planner *gpu.Planner, nodes []gpu.PlanNode) ([]gpu.Plan, bool) {
		return planner.MakeRoomForAll(nodes, []gpu.PendingPod{{Demand: demand}}, priorityOf(pod))
	}, pod)
	if !ok {
		return gpu.Plan{}, false, why
	}
	return plans[0], true, nil
}

// planGang is the plans that make room for the pods of gang g that it
// needs placed (the first g.Need() of g.Pending, those asking for GPUs) all
// at once, moving at most maxMoves pods in all (and gpu.MaxMoves of their
// demands, summed): plans[i] is for pods[i]. Unless the gang may mix GPU
// models, its pods go to nodes of one model, as the gang plugin places
// them (docs/gang.md, One GPU model): the model its bound pods run on, or
// the one whose plans move the fewest pods. why is nil when the gang
// needs no pod placed, or its pods ask for no GPU.
func (c *cluster) planGang(g *gpuview.GangPods, maxMoves int) (pods []*v1.Pod, plans []gpu.Plan, ok bool, why *noPlan) {
	what := "gang " + g.Key
	var pending []gpu.PendingPod
	var priority int32
	moves := 0
	for _, p := range g.Pending {
		if len(pods) == g.Need() {
			break
		}
		d, err := gpu.PlanDemand(c.policy, p)
		if err != nil {
			return nil, nil, false, &noPlan{text: fmt.Sprintf("no migration plan makes room for %s: pod %s/%s: %v", what, p.Namespace, p.Name, err)}
		}
		if d.IsZero() {
			continue // it needs no GPU: the gang plugin finds it a node as it does for any pod
		}
		if len(pods) == 0 || priorityOf(p) < priority {
			priority = priorityOf(p) // the lowest: no pod is moved for a pod of lower priority
		}
		pods = append(pods, p)
		pending = append(pending, gpu.PendingPod{ID: string(p.UID), Demand: d})
		moves += gpu.MaxMoves(&d)
	}
	if len(pending) == 0 {
		return nil, nil, false, nil
	}
	moves = min(moves, maxMoves)
	if moves < 1 {
		return nil, nil, false, &noPlan{text: fmt.Sprintf("no migration plan makes room for %s: its pods ask for too little GPU for any pod to be moved (%d moves per GPU)", what, gpu.MovesPerGPU)}
	}
	models := []string{""} // any model
	if !g.MixedModels {
		models = c.gangModels(g)
	}
	plans, ok, why = c.search(moves, what, func(planner *gpu.Planner, nodes []gpu.PlanNode) ([]gpu.Plan, bool) {
		var best []gpu.Plan
		fewest := -1
		for _, m := range models {
			held, allowed := onModel(pending, m)
			if !allowed {
				continue
			}
			plans, ok := planner.MakeRoomForAll(nodes, held, priority)
			if n := movesOf(plans); ok && (fewest < 0 || n < fewest) {
				best, fewest = plans, n
			}
		}
		return best, fewest >= 0
	}, nil)
	return pods, plans, ok, why
}

// gangModels are the GPU models gang g may run on, one of which it will:
// the models its bound pods run on, or every model of the cluster's nodes.
func (c *cluster) gangModels(g *gpuview.GangPods) []string {
	if len(g.PlacedModels) > 0 {
		return slices.Compact(slices.Sorted(slices.Values(g.PlacedModels)))
	}
	seen := map[string]bool{}
	for _, n := range c.planNodes() {
		if n.GPUs == nil || n.GPUs.Inventory == nil {
			continue
		}
		for _, d := range n.GPUs.Inventory.Devices {
			seen[d.Model] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// onModel is pending held to GPU model m ("" for any): allowed is false
// when some pod may not use m.
func onModel(pending []gpu.PendingPod, m string) (held []gpu.PendingPod, allowed bool) {
	if m == "" {
		return pending, true
	}
	held = slices.Clone(pending)
	for i := range held {
		if !held[i].Demand.AllowsModel(m) {
			return nil, false
		}
		held[i].Demand.Models = []string{m}
	}
	return held, true
}

func movesOf(plans []gpu.Plan) int {
	n := 0
	for _, p := range plans {
		n += len(p.Moves)
	}
	return n
}

// planNodes are the planner's nodes: the pods the rules and the rate
// limits let move are movable.
func (c *cluster) planNodes() []gpu.PlanNode {
	if c.nodes == nil {
		c.nodes = c.snap.PlanNodes(c.policy, func(p *v1.Pod) bool { return c.rules.Why(p) == "" && c.within(p) })
	}
	return c.nodes
}

// search runs find with a planner of at most maxMoves moves over the
// cluster's nodes, each pod admitted only where admits lets it (pending is
// the pod Admits knows as "", a pending pod without an ID; the others it
// knows by UID).
// Without plans, why says why, naming the disruption budgets when find
// would succeed were they to allow it; what names what room is made for.
func (c *cluster) search(maxMoves int, what string, find func(*gpu.Planner, []gpu.PlanNode) ([]gpu.Plan, bool), pending *v1.Pod) (plans []gpu.Plan, ok bool, why *noPlan) {
	snap := c.snap
	planner := gpu.Planner{Policy: c.policy, MaxMoves: maxMoves, Admits: func(node, uid string) bool {
		n, target := snap.NodeObject(node), pending
		if uid != "" {
			target = snap.Pod(uid)
		}
		return n != nil && target != nil && admits(n, target)
	}}
	if plans, ok = find(&planner, c.planNodes()); ok {
		return plans, true, nil
	}
	why = &noPlan{text: fmt.Sprintf("no migration plan makes room for %s: no %d or fewer movable pods free GPUs it fits on a node that admits it "+
		"(movable: owned by a %s, opted in with %s=true%s, in no gang, holding GPUs gpusched assigned, within its PodDisruptionBudgets; never for a pod of lower priority)",
		what, maxMoves, strings.Join(recreatingControllers, ", "), AnnotationMovable, c.rules.selectorNote())}
	// Would the budgets' consent make one?
	if c.relaxed == nil {
		c.relaxed = snap.PlanNodes(c.policy, func(p *v1.Pod) bool { return c.rules.whyBesidesBudgets(p) == "" && c.within(p) })
	}
	relaxed, found := find(&planner, c.relaxed)
	blocked := map[string]bool{}
	for _, plan := range relaxed {
		for _, mv := range plan.Moves {
			if p := snap.Pod(mv.Pod); found && p != nil {
				if b := c.rules.budgetBlocks(p); b != "" {
					blocked[b] = true
				}
			}
		}
	}
	if len(blocked) > 0 {
		why = &noPlan{text: fmt.Sprintf("a migration plan would make room for %s, but %s", what, strings.Join(slices.Sorted(maps.Keys(blocked)), "; ")), blocked: true}
	}
	return nil, false, why
}
