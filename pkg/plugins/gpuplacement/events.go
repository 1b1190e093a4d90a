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
//   - the pod's own GPU annotations change (a malformed value was fixed);
//   - with DRA (dra.Reader): a ResourceSlice changes (a node's GPUs come,
//     go or change owner), a ResourceClaim is deallocated or deleted (DRA
//     GPUs free up), or a DeviceClass changes (nvidia.com/gpu is mapped to
//     DRA or no longer). Registering DeviceClass events also keeps the
//     scheduler's extended-resource mapping fed when a profile leaves
//     DynamicResources out.
func (p *GPUPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	events := []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: isSchedulableAfterPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeAllocatable}, QueueingHintFn: isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}, QueueingHintFn: isSchedulableAfterPodUpdate},
	}
	if p.dra != nil {
		events = append(events,
			fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update | fwk.Delete}, QueueingHintFn: isSchedulableAfterDRAChange},
			fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Update | fwk.Delete}, QueueingHintFn: isSchedulableAfterDRAChange},
			fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.DeviceClass, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: isSchedulableAfterDRAChange},
		)
	}
	return events, nil
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
	sameReservations := oldNode != nil && oldNode.Annotations[gpu.AnnotationReservations] == newNode.Annotations[gpu.AnnotationReservations]
	if oldNode != nil && gpu.InventorySignature(oldNode) == gpu.InventorySignature(newNode) && sameReservations {
		return fwk.QueueSkip, nil // a reservation released or written may free GPUs for this pod, or hold them for it
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

// isSchedulableAfterDRAChange queues the pod on any change to the DRA
// objects registered: each can move GPUs between DRA and gpusched or free
// DRA GPUs, and they change rarely next to pods.
func isSchedulableAfterDRAChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	return fwk.Queue, nil
}
