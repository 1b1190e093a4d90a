package gpuplacement

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Reads of a pod whose bind failed: each bounded by settleReadTimeout;
// after a failed one, retried from settleFirstRetry, doubling up to
// settleMaxRetry, for as long as the API server cannot be read.
const (
	settleReadTimeout = 2 * time.Second
	settleFirstRetry  = 250 * time.Millisecond
	settleMaxRetry    = 5 * time.Second
)

// settleBind finds out whether a pod whose bind with assignment a failed
// was bound with it after all, and releases the GPUs Unreserve held for it
// (gpu.Ledger.Settle) unless it was. It reads the pod from the API server
// once; if the read fails it goes on reading in the background until one
// succeeds or the plugin stops. A pod bound with a keeps its GPUs: the
// ledger counts its annotation once the scheduler's cache sees it bound,
// and ends the doubt then.
func (p *GPUPlacement) settleBind(ctx context.Context, pod *v1.Pod, a gpu.Assignment) {
	if p.readBind(ctx, pod, a) {
		return
	}
	background := p.background
	if background == nil {
		background = context.Background()
	}
	logger(ctx).V(2).Info("Bind failed with its outcome unknown; its GPUs stay held until the pod can be read", "pod", klog.KObj(pod), "assignment", a.String())
	go func() {
		for retry := settleFirstRetry; ; retry = min(2*retry, settleMaxRetry) {
			select {
			case <-background.Done():
				return
			case <-time.After(retry):
			}
			if p.readBind(background, pod, a) {
				return
			}
		}
	}()
}

// readBind reads the pod and settles the doubt of its bind with a unless
// the pod is bound with a. It reports whether the read succeeded.
func (p *GPUPlacement) readBind(ctx context.Context, pod *v1.Pod, a gpu.Assignment) bool {
	ctx, cancel := context.WithTimeout(ctx, settleReadTimeout)
	defer cancel()
	got, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && got.UID != pod.UID:
		p.ledger.SettleAll(pod.UID) // gone
	case err == nil && (got.Spec.NodeName != a.Node || got.Annotations[gpu.AnnotationAssigned] != a.String()):
		p.ledger.Settle(pod.UID, a) // not bound with a: unbound, or by another bind
		if got.Spec.NodeName == "" && got.Annotations[gpu.AnnotationAssigned] == a.String() {
			// PreBind wrote a and the bind failed: the GPUs are free again,
			// so the pod must not keep naming them.
			if err := p.removeAssignment(ctx, got, a.String()); err != nil {
				logger(ctx).V(2).Info("Could not remove the assignment of a pod whose bind failed; its next cycle removes or replaces it",
					"pod", klog.KObj(pod), "assignment", a.String(), "err", err)
			}
		}
	case err == nil:
		logger(ctx).V(2).Info("A failed bind had bound the pod; its GPUs stay with it", "pod", klog.KObj(pod), "assignment", a.String())
	default:
		return false
	}
	return true
}
