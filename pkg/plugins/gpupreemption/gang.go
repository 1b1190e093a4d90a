package gpupreemption

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// gangGate refuses preemption for a pod of a GPUGang gang when the gang's
// unplaced pods could not reach its minMember even if every pod of lower
// priority than the preemptor were gone from every node: evicting for one
// member would then free GPUs the gang can never use. It returns nil when
// preemption may go ahead (or the pod is in no gang), else an Unschedulable
// status that names the gang and what it lacks. Unschedulable, not
// UnschedulableAndUnresolvable, so that GPUGang's own PostFilter still
// runs and releases the gang's reserved pods.
func (pl *GPUPreemption) gangGate(state fwk.CycleState, pod *v1.Pod) *fwk.Status {
	gangs, placement := gangview.Read(state), gpuledger.Read(state)
	if gangs == nil || placement == nil {
		return nil
	}
	key, pending, needed, ok := gangs.Unplaced(state)
	if !ok || needed == 0 {
		return nil
	}
	demands := make([]gpu.Demand, 0, len(pending))
	for _, m := range pending {
		if d, err := gpu.DemandFromPod(m); err == nil {
			demands = append(demands, d)
		}
	}
	nodes, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: listing nodes: %w", Name, err))
	}
	priority := corev1helpers.PodPriority(pod)
	views := make([]*gpu.NodeGPUs, 0, len(nodes))
	for _, ni := range nodes {
		view := placement.NodeView(ni)
		for _, pi := range ni.GetPods() {
			if corev1helpers.PodPriority(pi.GetPod()) >= priority {
				continue
			}
			if a, held := placement.Held(pi.GetPod()); held && a.Node == view.Name {
				view = view.Without(&a)
			}
		}
		views = append(views, view)
	}
	if fit := gang.FitFree(views, demands, needed); !fit.Fits() {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"preemption: gang %s would not have %d pods placed even with every pod of priority below %d evicted: %s",
			key, needed, priority, fit.Reason()))
	}
	return nil
}
