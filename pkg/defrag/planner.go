package defrag

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
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

// gangAsk is what a pending gang asks of a plan: the pods it needs placed
// that ask for GPUs, in the scheduler's queue order, their demands, and
// the lowest of their priorities (no pod is moved for a pod of lower
// priority).
type gangAsk struct {
	pods     []*v1.Pod
	pending  []gpu.PendingPod
	priority int32
}

// askOf is what gang g asks of a plan (gangAsk), or why it is not planned
// for: why is "" where the gang says nothing to be told (it needs no pod
// placed, has too few pods pending, has a pod with ResourceClaims, which
// the planner does not place, or a GPU pod for another scheduler).
// Of the g.Need() pods the gang still needs, its pending pods without GPUs
// count first (they need no room a plan makes: taken to find a node as
// they are), then its pending GPU pods in the scheduler's queue order.
// specs are its PodGroups (ReadGangSpecs): a gang whose PodGroup is not
// among them is not planned for, nor a gang of the Workload API, whose
// minCount the defragmenter does not read.
func (c *cluster) askOf(g *gpuview.GangPods, specs map[string]gpuview.GangSpec) (a gangAsk, why string, ok bool) {
	need := g.Need()
	if need == 0 {
		return a, "", false
	}
	if strings.Contains(g.Key, "/"+podgroup.WorkloadGangPrefix) {
		return a, fmt.Sprintf("no migration plan for gang %s: gangs of the Workload API are not planned for (the defragmenter does not read their minCount)", g.Key), false
	}
	if _, known := specs[g.Key]; !known {
		return a, fmt.Sprintf("no migration plan for gang %s: its PodGroup was not read (not found, not valid, or PodGroups may not be listed)", g.Key), false
	}
	withoutGPUs := 0
	var gpuPods []*v1.Pod
	var demands []gpu.Demand
	for k, p := range g.Pending {
		d, err := gpu.PlanDemand(c.policy, p)
		switch {
		case len(p.Spec.ResourceClaims) > 0:
			return a, "", false
		case err != nil:
			return a, fmt.Sprintf("no migration plan for gang %s: pod %s/%s: %v", g.Key, p.Namespace, p.Name, err), false
		case d.IsZero():
			withoutGPUs++
		case k >= g.Queued:
			return a, "", false // a GPU pod for another scheduler
		default:
			gpuPods, demands = append(gpuPods, p), append(demands, d)
		}
	}
	needGPUs := need - min(withoutGPUs, need)
	if len(gpuPods) < needGPUs {
		return a, "", false // the scheduler holds the gang back until its pods exist
	}
	for i, p := range gpuPods[:needGPUs] {
		if i == 0 || priorityOf(p) < a.priority {
			a.priority = priorityOf(p)
		}
		a.pods = append(a.pods, p)
		a.pending = append(a.pending, gpu.PendingPod{ID: string(p.UID), Demand: demands[i]})
	}
	return a, "", len(a.pods) > 0
}

// planGang is the plans that make room at once for the pods of gang g
// that a asks to place, moving at most maxMoves pods in all (and
// gpu.MovesPerGPU per GPU the pods ask in all): plans[i] is for a.pods[i].
// Unless the gang may mix GPU models, its pods go to nodes of one model,
// as the gang plugin places them (docs/gang.md, One GPU model): the model
// its bound GPU pods run on, or the one whose plans move the fewest pods.
func (c *cluster) planGang(g *gpuview.GangPods, a *gangAsk, maxMoves int) (plans []gpu.Plan, ok bool, why *noPlan) {
	what := "gang " + g.Key
	var milli int64
	for i := range a.pending {
		milli += a.pending[i].Demand.TotalMilli()
	}
	moves := min(int(milli*gpu.MovesPerGPU/gpu.MilliPerGPU), maxMoves)
	if moves < 1 {
		return nil, false, &noPlan{text: fmt.Sprintf("no migration plan makes room for %s: its pods ask for too little GPU for any pod to be moved (%d moves per GPU)", what, gpu.MovesPerGPU)}
	}
	models := []string{""} // any model
	if !g.MixedModels {
		models = c.gangModels(g)
	}
	return c.search(moves, what, func(planner *gpu.Planner, nodes []gpu.PlanNode) ([]gpu.Plan, bool) {
		var best []gpu.Plan
		fewest := -1
		for _, m := range models {
			held, allowed := onModel(a.pending, m)
			if !allowed {
				continue
			}
			plans, ok := planner.MakeRoomForAll(nodes, held, a.priority)
			if n := movesOf(plans); ok && (fewest < 0 || n < fewest) {
				best, fewest = plans, n
			}
		}
		return best, fewest >= 0
	}, nil)
}

// gangModels are the GPU models gang g may run on, one of which it will:
// the models its bound GPU pods run on, or every model of the cluster's
// nodes (a device without a model counts for none); "" (any model) when
// the nodes name none, which leaves the gang plugin no model to hold it to.
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
			if d.Model != "" {
				seen[d.Model] = true
			}
		}
	}
	if len(seen) == 0 {
		return []string{""}
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
