package gpupreemption

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// SelectVictimsOnNode implements preemption.Interface: the units (see
// units) whose eviction lets preemptor fit nodeInfo, and how many of their
// pods a PodDisruptionBudget protects.
//
// All eligible units are removed first; if the pod does not fit even then,
// the node is no candidate. Next the engine's cheapest GPU victims (propose)
// are tried alone: every other unit comes back, and if the Filter plugins
// pass, they are the victims. Otherwise every unit is reprieved in
// upstream's order — PDB-protected first, the most important first — with
// the units outside the engine's set tried before those in it, and the
// units that cannot come back are the victims.
//
// nodeInfo is a copy the caller made; it is changed. Units with pods on
// other nodes (gangs) are removed there only in the plugins' cycle state, as
// DefaultPreemption does.
func (pl *GPUPreemption) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, preemptor *v1.Pod,
	nodeInfo fwk.NodeInfo, all []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	units := pl.units(state, nodeInfo, preemptor, all)
	if len(units) == 0 {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "No preemption victims found for incoming pod")
	}
	proposed := pl.propose(state, nodeInfo, units)

	e := &evaluation{handle: pl.handle, ctx: ctx, state: state, preemptor: preemptor, node: nodeInfo}
	for _, u := range units {
		if err := e.remove(u); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
	}
	if status := e.fits(); !status.IsSuccess() {
		return nil, 0, status
	}
	slices.SortStableFunc(units, func(a, b *unit) int { return importance(pl, a, b) })
	violating, nonViolating := preemption.FilterVictimsWithPDBViolation(units, pdbs)
	violations := map[*unit]int{}
	for _, v := range violating {
		violations[v.Victim] = v.ViolateCount
	}

	if proposed != nil {
		victims, ok, err := e.tryOnly(units, proposed)
		if err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
		if ok {
			return podsOf(victims, violations)
		}
	}

	// Upstream's reprieve order, the engine's victims last within each part.
	var order []*unit
	for _, part := range [][]*unit{unitsOf(violating), nonViolating} {
		outside := slices.DeleteFunc(slices.Clone(part), func(u *unit) bool { return proposed[u] })
		inside := slices.DeleteFunc(slices.Clone(part), func(u *unit) bool { return !proposed[u] })
		order = append(order, outside...)
		order = append(order, inside...)
	}
	var victims []*unit
	for _, u := range order {
		back, err := e.reprieve(u)
		if err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
		if !back {
			victims = append(victims, u)
		}
	}
	slices.SortStableFunc(victims, func(a, b *unit) int { return importance(pl, a, b) })
	return podsOf(victims, violations)
}

// propose is the engine's cheapest set of units whose GPUs on the node let
// the pod's demand fit (gpu.ChooseVictims), or nil when the pod asks for no
// GPU, the node's GPUs are DRA's, or no set of them would do.
func (pl *GPUPreemption) propose(state fwk.CycleState, nodeInfo fwk.NodeInfo, units []*unit) map[*unit]bool {
	placement := gpuledger.Read(state)
	if placement == nil {
		return nil
	}
	n, req, ok := placement.PreemptionView(state, nodeInfo)
	if !ok {
		return nil
	}
	node := nodeInfo.Node().Name
	vs := make([]gpu.Victim, len(units))
	for i, u := range units {
		vs[i] = gpu.Victim{Priority: u.priority, Pods: len(u.pods)}
		for _, pi := range u.pods {
			if pod := pi.GetPod(); pod.Spec.NodeName == node {
				if a, held := placement.Held(pod); held && a.Node == node {
					vs[i].Held = append(vs[i].Held, a)
				}
			}
		}
	}
	chosen, ok := gpu.ChooseVictims(n, req, vs)
	if !ok {
		return nil
	}
	out := make(map[*unit]bool, len(chosen))
	for _, i := range chosen {
		out[units[i]] = true
	}
	return out
}

// importance orders units most important first, as DefaultPreemption's
// MoreImportantVictim does.
func importance(pl *GPUPreemption, a, b *unit) int {
	switch {
	case pl.MoreImportantVictim(a, b):
		return -1
	case pl.MoreImportantVictim(b, a):
		return 1
	}
	return 0
}

func unitsOf(vs []preemption.ViolatingVictim[*unit]) []*unit {
	out := make([]*unit, len(vs))
	for i, v := range vs {
		out[i] = v.Victim
	}
	return out
}

// podsOf lists the victims' pods and counts their PDB violations.
func podsOf(victims []*unit, violations map[*unit]int) ([]*v1.Pod, int, *fwk.Status) {
	var pods []*v1.Pod
	n := 0
	for _, u := range victims {
		n += violations[u]
		for _, pi := range u.pods {
			pods = append(pods, pi.GetPod())
		}
	}
	return pods, n, nil
}

// evaluation removes and adds back units on a node copy and asks the Filter
// plugins whether the preemptor fits it.
type evaluation struct {
	handle    fwk.Handle
	ctx       context.Context
	state     fwk.CycleState
	preemptor *v1.Pod
	node      fwk.NodeInfo
}

func (e *evaluation) fits() *fwk.Status {
	return e.handle.RunFilterPluginsWithNominatedPods(e.ctx, e.state, e.preemptor, e.node)
}

// remove takes u's pods off the node (those on it) and out of the plugins'
// cycle state (all of them).
func (e *evaluation) remove(u *unit) error {
	for _, pi := range u.pods {
		ni := e.nodeOf(pi.GetPod())
		if ni == nil {
			continue
		}
		if ni == e.node {
			if err := ni.RemovePod(klog.FromContext(e.ctx), pi.GetPod()); err != nil {
				return err
			}
		}
		if status := e.handle.RunPreFilterExtensionRemovePod(e.ctx, e.state, e.preemptor, pi, ni); !status.IsSuccess() {
			return status.AsError()
		}
	}
	return nil
}

// add puts u's pods back, undoing remove.
func (e *evaluation) add(u *unit) error {
	for _, pi := range u.pods {
		ni := e.nodeOf(pi.GetPod())
		if ni == nil {
			continue
		}
		if ni == e.node {
			ni.AddPodInfo(pi)
		}
		if status := e.handle.RunPreFilterExtensionAddPod(e.ctx, e.state, e.preemptor, pi, ni); !status.IsSuccess() {
			return status.AsError()
		}
	}
	return nil
}

// nodeOf is the node copy for a pod on the evaluated node, else the
// snapshot's NodeInfo of the pod's node (nil when gone).
func (e *evaluation) nodeOf(pod *v1.Pod) fwk.NodeInfo {
	if pod.Spec.NodeName == e.node.Node().Name {
		return e.node
	}
	ni, err := e.handle.SnapshotSharedLister().NodeInfos().Get(pod.Spec.NodeName)
	if err != nil {
		return nil
	}
	return ni
}

// reprieve adds u back and keeps it if the preemptor still fits; otherwise
// it removes u again and reports false.
func (e *evaluation) reprieve(u *unit) (bool, error) {
	if err := e.add(u); err != nil {
		return false, err
	}
	if e.fits().IsSuccess() {
		return true, nil
	}
	return false, e.remove(u)
}

// tryOnly adds back every unit outside only, and reports whether the
// preemptor fits with only those gone; if not, it removes them again.
func (e *evaluation) tryOnly(units []*unit, only map[*unit]bool) (victims []*unit, ok bool, err error) {
	var back []*unit
	for _, u := range units {
		if only[u] {
			victims = append(victims, u)
			continue
		}
		if err := e.add(u); err != nil {
			return nil, false, err
		}
		back = append(back, u)
	}
	if e.fits().IsSuccess() {
		return victims, true, nil
	}
	for _, u := range back {
		if err := e.remove(u); err != nil {
			return nil, false, err
		}
	}
	return nil, false, nil
}
