package gpuplacement

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// EventsToRegister lists the events that may make a pod this plugin rejected
// schedulable, each with a queueing hint that skips the events that cannot:
//   - a pod that held GPUs is deleted (or terminates);
//   - a node is added, or its GPU labels, annotations or allocatable change,
//     and it could host the pod were all its GPUs free;
//   - the pod's own GPU annotations change (a malformed value was fixed).
func (p *GPUPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: isSchedulableAfterPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeAllocatable}, QueueingHintFn: isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}, QueueingHintFn: isSchedulableAfterPodUpdate},
	}, nil
}

func isSchedulableAfterPodDelete(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if _, held := deleted.Annotations[gpu.AnnotationAssigned]; held {
		return fwk.Queue, nil
	}
	if d, err := gpu.DemandFromPod(deleted); err == nil && !d.IsZero() {
		return fwk.Queue, nil // whole GPUs placed by another scheduler
	}
	logger.V(5).Info("Deleted pod held no GPUs", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted))
	return fwk.QueueSkip, nil
}

func isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	demand, err := gpu.DemandFromPod(pod)
	if err != nil {
		return fwk.QueueSkip, nil // only a change to the pod can help
	}
	if oldNode != nil && gpu.InventorySignature(oldNode) == gpu.InventorySignature(newNode) {
		return fwk.QueueSkip, nil
	}
	if !gpu.CouldFit(newNode, &demand) {
		logger.V(5).Info("Node cannot host the pod's GPUs", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

func isSchedulableAfterPodUpdate(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, newPod, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if gpu.SameDemandSource(oldPod, newPod) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}
