package gpuplacement

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// settleBind settles a bind in doubt by the engine's rule
// (gpu.Ledger.SettleBind: no read before d.NotBefore, then reads until one
// answers) while the plugin runs. A pod found unbound that still carries
// the assignment PreBind wrote loses it: its GPUs are free again, so it must
// not keep naming them (its next cycle's PreBind would remove it too). Not
// while a new cycle of the pod holds GPUs (it may have chosen the same
// assignment and be writing it), and not if the pod changed since the read.
func (p *GPUPlacement) settleBind(ctx context.Context, pod *v1.Pod, d gpu.BindInDoubt) {
	background := p.background
	if background == nil {
		background = context.Background()
	}
	log := logger(ctx).WithValues("pod", klog.KObj(pod), "assignment", d.Assignment.String())
	log.V(2).Info("Bind failed with its outcome unknown; its GPUs stay held until it is settled", "notBefore", d.NotBefore)
	outcome, got := p.ledger.SettleBind(background, d, func(ctx context.Context) (*v1.Pod, error) {
		return p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	})
	log.V(2).Info("Settled a bind in doubt", "outcome", outcome.String())
	if _, retrying := p.ledger.Assumed(pod.UID); outcome == gpu.BindNotBound && !retrying &&
		got.Spec.NodeName == "" && got.Annotations[gpu.AnnotationAssigned] == d.Assignment.String() {
		ctx, cancel := context.WithTimeout(background, removeTimeout)
		defer cancel()
		if err := p.removeAssignment(ctx, got, d.Assignment.String(), got.ResourceVersion); err != nil {
			log.V(2).Info("Could not remove the assignment of a pod whose bind failed; its next cycle removes or replaces it", "err", err)
		}
	}
	if outcome == gpu.BindNotBound || outcome == gpu.BindPodGone {
		p.retryPendingGPUPods(log)
	}
}

// removeTimeout bounds the patch that removes a settled pod's assignment.
const removeTimeout = 10 * time.Second

// retryPendingGPUPods hands the pending pods that ask for GPUs back to the
// scheduler's active queue: GPUs held in doubt were just released, and
// no cluster event says so, so a pod found unschedulable while they were
// held would otherwise wait for an unrelated event, or for the queue's
// flush of unschedulable pods (five minutes). The pod whose bind was
// settled is among them: its own held GPUs may have made it unschedulable.
func (p *GPUPlacement) retryPendingGPUPods(log klog.Logger) {
	if p.handle == nil || p.handle.SharedInformerFactory() == nil {
		return
	}
	all, err := p.handle.SharedInformerFactory().Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return
	}
	if pending := pendingGPUPods(all, p.waiting); len(pending) > 0 {
		log.V(2).Info("Retrying pending GPU pods after GPUs held in doubt were released", "pods", len(pending))
		p.handle.Activate(log, pending)
	}
}

// pendingGPUPods returns, keyed by namespace/name, the pods that ask for
// GPUs (or hold DRA claims) and are not bound, not being deleted, not finished, not gated and
// not waiting.
func pendingGPUPods(pods []*v1.Pod, waiting func(*v1.Pod) bool) map[string]*v1.Pod {
	var pending map[string]*v1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 ||
			pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed || waiting(pod) {
			continue
		}
		if d, err := gpu.DemandFromPod(pod); (err != nil || d.IsZero()) && len(pod.Spec.ResourceClaims) == 0 {
			continue // asks for no GPU, as an annotation, a resource or a DRA claim
		}
		if pending == nil {
			pending = map[string]*v1.Pod{}
		}
		pending[pod.Namespace+"/"+pod.Name] = pod
	}
	return pending
}
