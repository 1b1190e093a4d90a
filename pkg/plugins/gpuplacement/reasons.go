package gpuplacement

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// The reason keeper. When the scheduler fails to place a pod it writes the
// reason into the pod's PodScheduled condition; if that write fails (the API
// server restarting, a network cut), kube-scheduler logs the error and leaves
// the pod in its unschedulable queue with no reason, for up to five minutes
// (podMaxInUnschedulablePodsDuration) or until a cluster event moves it.
// Every reasonSweepEvery, GPUPlacement hands every pending pod older than
// reasonSweepEvery that has no PodScheduled condition back to the active
// queue (fwk.Handle's Activate), so the scheduler tries it again and writes
// the reason once the API server answers. A pod waiting at Permit (a gang
// member), held by a scheduling gate, or already in the active queue is left
// alone: Activate moves only pods parked unschedulable or in backoff.
const reasonSweepEvery = 10 * time.Second

// keepReasons runs the reason keeper until ctx ends. A handle without an
// informer factory (the plugin's unit tests) has no pods to sweep.
func (p *GPUPlacement) keepReasons(ctx context.Context) {
	if p.handle == nil || p.handle.SharedInformerFactory() == nil {
		return
	}
	pods := p.handle.SharedInformerFactory().Core().V1().Pods().Lister()
	go func() {
		tick := time.NewTicker(reasonSweepEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			all, err := pods.List(labels.Everything())
			if err != nil {
				continue
			}
			if lost := withoutReason(all, time.Now().Add(-reasonSweepEvery), p.waiting); len(lost) > 0 {
				klog.FromContext(ctx).V(2).Info("Retrying pending pods whose reason was not written", "plugin", Name, "pods", len(lost))
				p.handle.Activate(klog.FromContext(ctx), lost)
			}
		}
	}()
}

// waiting reports whether the pod waits at Permit.
func (p *GPUPlacement) waiting(pod *v1.Pod) bool { return p.handle.GetWaitingPod(pod.UID) != nil }

// withoutReason returns, keyed by namespace/name, the pods created before
// createdBefore that are not bound, not being deleted, not finished, not
// gated and not waiting, and carry no PodScheduled condition.
func withoutReason(pods []*v1.Pod, createdBefore time.Time, waiting func(*v1.Pod) bool) map[string]*v1.Pod {
	var lost map[string]*v1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 ||
			pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed ||
			!pod.CreationTimestamp.Time.Before(createdBefore) || hasScheduledCondition(pod) || waiting(pod) {
			continue
		}
		if lost == nil {
			lost = map[string]*v1.Pod{}
		}
		lost[pod.Namespace+"/"+pod.Name] = pod
	}
	return lost
}

func hasScheduledCondition(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return true
		}
	}
	return false
}
