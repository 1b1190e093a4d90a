package gpupreemption

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
)

// gangGate refuses preemption for a pod of a GPUGang gang when the gang's
// unplaced pods could not reach its minMember even if every pod of lower
// priority than the preemptor were gone from every node
// (gangview.Gangs.FitAfterEviction): evicting for one member would then
// free GPUs the gang can never use. It returns nil when preemption may go
// ahead (or the pod is in no gang), else an Unschedulable status that names
// the gang and what it lacks. Unschedulable, not
// UnschedulableAndUnresolvable, so that GPUGang's own PostFilter still
// runs and releases the gang's reserved pods.
func (pl *GPUPreemption) gangGate(ctx context.Context, state fwk.CycleState, pod *v1.Pod) *fwk.Status {
	gangs := gangview.Read(state)
	if gangs == nil {
		return nil
	}
	nodes, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: listing nodes: %w", Name, err))
	}
	priority := corev1helpers.PodPriority(pod)
	lower := func(p *v1.Pod) bool { return corev1helpers.PodPriority(p) < priority }
	key, needed, reason, ok := gangs.FitAfterEviction(ctx, state, nodes, lower)
	if !ok || reason == "" {
		return nil
	}
	return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
		"preemption: gang %s would not have %d pods placed even with every pod of priority below %d evicted: %s",
		key, needed, priority, reason))
}
