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
// move, each only to a node that admits it (admits); without one, why
// says why, naming the disruption budgets when a plan exists were they to
// allow it. why is nil for a pod that asks for no GPU.
func (c *cluster) plan(pod *v1.Pod, maxMoves int) (plan gpu.Plan, ok bool, why *noPlan) {
	demand, err := gpu.PlanDemand(c.policy, pod)
	if err != nil || demand.IsZero() {
		return gpu.Plan{}, false, nil
	}
	snap := c.snap
	planner := gpu.Planner{Policy: c.policy, MaxMoves: min(gpu.MaxMoves(&demand), maxMoves), Admits: func(node, uid string) bool {
		n, target := snap.NodeObject(node), pod
		if uid != "" {
			target = snap.Pod(uid)
		}
		return n != nil && target != nil && admits(n, target)
	}}
	why = &noPlan{text: fmt.Sprintf("no migration plan makes room for this pod: no %d or fewer movable pods free GPUs it fits on a node that admits it "+
		"(movable: owned by a %s, opted in with %s=true%s, in no gang, holding GPUs gpusched assigned, within its PodDisruptionBudgets; never for a pod of lower priority)",
		planner.MaxMoves, strings.Join(recreatingControllers, ", "), AnnotationMovable, c.rules.selectorNote())}
	if planner.MaxMoves < 1 {
		why.text = fmt.Sprintf("no migration plan makes room for this pod: it asks for %s, for which no pod is moved (%d moves per GPU)", demand.String(), gpu.MovesPerGPU)
		return gpu.Plan{}, false, why
	}
	priority := priorityOf(pod)
	if c.nodes == nil {
		c.nodes = snap.PlanNodes(c.policy, func(p *v1.Pod) bool { return c.rules.Why(p) == "" && c.within(p) })
	}
	if plan, ok = planner.MakeRoom(c.nodes, &demand, priority); ok {
		return plan, true, nil
	}
	// Would the budgets' consent make one?
	if c.relaxed == nil {
		c.relaxed = snap.PlanNodes(c.policy, func(p *v1.Pod) bool { return c.rules.whyBesidesBudgets(p) == "" && c.within(p) })
	}
	relaxed, found := planner.MakeRoom(c.relaxed, &demand, priority)
	blocked := map[string]bool{}
	for _, mv := range relaxed.Moves {
		if p := snap.Pod(mv.Pod); found && p != nil {
			if b := c.rules.budgetBlocks(p); b != "" {
				blocked[b] = true
			}
		}
	}
	if len(blocked) > 0 {
		why = &noPlan{text: "a migration plan would make room for this pod, but " + strings.Join(slices.Sorted(maps.Keys(blocked)), "; "), blocked: true}
	}
	return gpu.Plan{}, false, why
}
