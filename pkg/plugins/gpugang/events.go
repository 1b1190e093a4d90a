package gpugang

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpusched/gpusched/pkg/podgroup"
)

// EventsToRegister lists the events that may make a gang pod this plugin
// rejected schedulable:
//   - another pod of its gang is created (the gang reaches minMember);
//   - a bound pod is deleted or a node is added: GPUs are freed, and a gang
//     that was released may fit now;
//   - a ResourceClaim of a pod of its gang is created: a gang waiting for
//     its members' claims may be planned now (and podHandler when the
//     claim is named in the member's status).
//
// A PodGroup being created or changed is watched by the plugin's own cache,
// which moves the gang's pods back to the queue (podGroupHandler).
func (p *GPUGang) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.UnscheduledPod, ActionType: fwk.Add}, QueueingHintFn: isSchedulableAfterMemberAdded},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: isGangPod},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}, QueueingHintFn: isGangPod},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add}, QueueingHintFn: p.isSchedulableAfterClaimAdded},
	}, nil
}

func isSchedulableAfterMemberAdded(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	_, added, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	a, aok, aerr := podgroup.NameOf(added)
	b, bok, berr := podgroup.NameOf(pod)
	if aok && bok && aerr == nil && berr == nil && a == b && added.Namespace == pod.Namespace {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// isSchedulableAfterClaimAdded queues a gang pod when a claim of a pod of
// its gang is created: the gang may have waited for it (PreFilter). The
// claim's owner (the pod it was made for, from a template) names the pod.
func (p *GPUGang) isSchedulableAfterClaimAdded(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	_, claim, err := schedutil.As[*resourceapi.ResourceClaim](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	name, ok, err := podgroup.NameOf(pod)
	if !ok || err != nil || claim.Namespace != pod.Namespace {
		return fwk.QueueSkip, nil
	}
	for _, m := range p.members(groupKey(pod.Namespace, name)) {
		for _, owner := range claim.OwnerReferences {
			if owner.UID == m.UID {
				return fwk.Queue, nil
			}
		}
	}
	return fwk.QueueSkip, nil
}

func isGangPod(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if _, ok := pod.Labels[podgroup.LabelPodGroup]; ok {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// podHandler keeps PodGroup status in step with the gang's pods, forgets
// the reservations of deleted pods, and moves a gang's pods back to the
// queue when a new pod completes its minMember: pods refused for being too
// few must not depend on the new pod's own event reaching the queue (a pod
// held by a scheduling gate never enters it).
func (p *GPUGang) podHandler() cache.ResourceEventHandler {
	touch := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		if name, ok, err := podgroup.NameOf(pod); ok && err == nil && p.ownsPod(pod) {
			p.status.enqueue(groupKey(pod.Namespace, name))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			touch(obj)
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName == "" {
				p.activateIfComplete(pod)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			touch(obj)
			// The resourceclaim controller names a member's claims in its
			// status once it made them: a gang that waited for them
			// (PreFilter) may be planned now.
			if o, n, ok := podPair(oldObj, obj); ok && n.Spec.NodeName == "" &&
				!equality.Semantic.DeepEqual(o.Status.ResourceClaimStatuses, n.Status.ResourceClaimStatuses) {
				if name, ok, err := podgroup.NameOf(n); ok && err == nil {
					key := groupKey(n.Namespace, name)
					p.activateQueued(context.Background(), key, p.placed(key))
				}
			}
		},
		DeleteFunc: func(obj any) {
			touch(obj)
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				p.reservations.Remove(pod.UID)
			}
		},
	}
}

func podPair(oldObj, newObj any) (o, n *v1.Pod, ok bool) {
	o, ok1 := oldObj.(*v1.Pod)
	n, ok2 := newObj.(*v1.Pod)
	return o, n, ok1 && ok2
}

// podGroupHandler moves a gang's pods back to the queue when its PodGroup
// is created or changed: the pods may have been waiting for it.
func (p *GPUGang) podGroupHandler() cache.ResourceEventHandler {
	changed := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		key := groupKey(u.GetNamespace(), u.GetName())
		p.activateQueued(context.Background(), key, p.placed(key))
		p.status.enqueue(key)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*unstructured.Unstructured)
			n, ok2 := newObj.(*unstructured.Unstructured)
			if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() {
				return // a status update, ours most likely
			}
			changed(newObj)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				key := groupKey(u.GetNamespace(), u.GetName())
				p.status.forget(key)
				p.fits.Delete(key)
			}
		},
	}
}

// activateIfComplete moves the queued pods of pod's gang to the front of the
// queue if the gang has minMember pods.
func (p *GPUGang) activateIfComplete(pod *v1.Pod) {
	name, ok, err := podgroup.NameOf(pod)
	if !ok || err != nil {
		return
	}
	obj := p.podGroup(pod.Namespace, name)
	if obj == nil {
		return
	}
	pg, err := podgroup.FromUnstructured(obj)
	if err != nil || pg.Validate() != nil {
		return
	}
	key := groupKey(pod.Namespace, name)
	if len(p.members(key)) >= int(pg.Spec.MinMember) {
		p.activateQueued(context.Background(), key, p.placed(key))
	}
}
