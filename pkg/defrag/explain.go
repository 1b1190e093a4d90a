package defrag

import (
	"fmt"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Explain says, for a pending pod, what the defragmenter is doing for it
// (the GPUs a plan under way reserved for it) or would do now (the plan it
// would make under rules, the hourly limits aside, placing pods as policy
// does: for a pod of a gang, the plans for the pods the gang needs placed,
// its PodGroup read from gangs), or why no plan exists; "" for a pod that
// asks for no GPU. It is what `kubectl gpusched explain` shows.
func Explain(snap *gpuview.Snapshot, pod *v1.Pod, gangs map[string]gpuview.GangSpec, rules Rules, policy gpu.PolicyType, now time.Time) (string, error) {
	for i := range snap.Nodes {
		node := snap.NodeObject(snap.Nodes[i].Name)
		rs, _ := gpu.ReservationsOf(node)
		for _, r := range rs {
			if r.Pod == pod.UID && r.Current(now) {
				return fmt.Sprintf("a migration plan under way reserved node %s GPUs %s for it (reservation %s, until %s)",
					node.Name, devices(&r.Assignment), r.ID, r.Expires.UTC().Format(time.RFC3339)), nil
			}
		}
	}
	p, err := snap.Policy(policy)
	if err != nil {
		return "", err
	}
	c := newCluster(snap, p, &rules, func(*v1.Pod) bool { return true })
	t := &target{pods: []*v1.Pod{pod}}
	var plans []gpu.Plan
	var ok bool
	var why *noPlan
	if g, inGang := snap.GangOf(pod, gangs); inGang {
		a, text, asks := c.askOf(&g, gangs)
		if !asks {
			return text, nil
		}
		t.gang, t.pods = g.Key, a.pods
		plans, ok, why = c.planGang(&g, &a, math.MaxInt)
	} else {
		var plan gpu.Plan
		plan, ok, why = c.plan(pod, math.MaxInt)
		plans = []gpu.Plan{plan}
	}
	switch {
	case why == nil && !ok, ok && movesOf(plans) == 0: // nothing to plan for, or nothing to move
		return "", nil
	case !ok:
		return why.text, nil
	}
	return "the defragmenter (gpusched defragment) would make room: " + describe(snap, t, plans), nil
}
