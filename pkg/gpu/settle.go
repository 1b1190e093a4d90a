package gpu

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// A bind in doubt is a Binding whose write failed without saying whether
// the API server stored it: a timeout, a lost connection, a server error.
// Its GPUs stay held (Ledger.Doubt) until it is settled, by one rule that
// every front end that binds (the GPUPlacement plugin, the extender) calls:
//
//   - a write the API server refused (BindRefused) stored nothing: settle
//     at once;
//   - otherwise the write may still commit until the API server gives up
//     on it, DefaultBindSettleAfter after its last attempt ended; only a
//     read made after that proves an unbound pod stays unbound;
//   - the read's answer is ClassifyBind's.

// DefaultBindSettleAfter is how long after a Binding's write ended (its
// last attempt) a read that finds the pod unbound proves it will stay so:
// the API server's default --request-timeout, the longest it works on a
// request it accepted.
const DefaultBindSettleAfter = 60 * time.Second

// Reads of a pod whose bind is in doubt: each bounded by settleReadTimeout;
// after a failed one, retried from settleFirstRetry, doubling up to
// settleMaxRetry, for as long as the API server cannot be read.
const (
	settleReadTimeout = 5 * time.Second
	settleFirstRetry  = 250 * time.Millisecond
	settleMaxRetry    = 5 * time.Second
)

// BindRefused reports whether a failed write of a Binding was refused by
// the API server, so that nothing was written and nothing will be: a
// malformed, unauthorized, forbidden or invalid request, or a pod that is
// gone. Not a conflict: "already assigned" may answer a resend of this very
// write, which was stored. Not a 429 either: client-go resends a write
// answered 429, or 5xx with Retry-After, so the 429 it returns may follow
// an attempt that was stored.
func BindRefused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case 400, 401, 403, 404, 422:
		return true
	}
	return false
}

// BindOutcome is what a read of a pod says about its bind in doubt.
type BindOutcome int

const (
	// BindUnknown: the pod could not be read.
	BindUnknown BindOutcome = iota
	// BindBound: the pod is bound with the assignment; its GPUs are its
	// own, and the ledger counts them once the caller's pods show it bound.
	BindBound
	// BindNotBound: the pod is unbound, or bound elsewhere or otherwise.
	BindNotBound
	// BindPodGone: the pod was deleted, or replaced by another of its name.
	BindPodGone
)

func (o BindOutcome) String() string {
	switch o {
	case BindBound:
		return "bound"
	case BindNotBound:
		return "not bound"
	case BindPodGone:
		return "pod gone"
	}
	return "unknown"
}

// ClassifyBind reads the answer of a Get of the pod whose bind with a is in
// doubt: pod and err as the client returned them.
func ClassifyBind(uid types.UID, a Assignment, pod *v1.Pod, err error) BindOutcome {
	switch {
	case apierrors.IsNotFound(err):
		return BindPodGone
	case err != nil || pod == nil:
		return BindUnknown
	case pod.UID != uid:
		return BindPodGone
	case pod.Spec.NodeName == a.Node && pod.Annotations[AnnotationAssigned] == a.String():
		return BindBound
	}
	return BindNotBound
}

// BindInDoubt is a bind whose write failed without saying whether it was
// stored, as Ledger.SettleBind settles it.
type BindInDoubt struct {
	UID        types.UID
	Assignment Assignment
	// NotBefore is when a read that finds the pod unbound proves it stays
	// so: the write's end plus the settle-after (DefaultBindSettleAfter).
	NotBefore time.Time
}

// SettleBind waits until d.NotBefore, then reads the pod with read (a Get
// from the API server) until a read answers, and settles the doubt by
// ClassifyBind: a pod gone ends every doubt of its UID (SettleAll), a pod
// not bound with the assignment ends this one (Settle), a bound pod keeps
// its GPUs. It returns the outcome and the pod read (nil when gone), or
// BindUnknown when ctx ended first: the GPUs stay held, as they must while
// nothing is known. The pod's deletion seen by the caller's informer ends
// the doubt too (SettleAll), whatever SettleBind is doing.
func (l *Ledger) SettleBind(ctx context.Context, d BindInDoubt, read func(context.Context) (*v1.Pod, error)) (BindOutcome, *v1.Pod) {
	wait := time.Until(d.NotBefore)
	for retry := settleFirstRetry; ; retry = min(2*retry, settleMaxRetry) {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return BindUnknown, nil
			case <-t.C:
			}
		}
		wait = retry
		readCtx, cancel := context.WithTimeout(ctx, settleReadTimeout)
		pod, err := read(readCtx)
		cancel()
		switch outcome := ClassifyBind(d.UID, d.Assignment, pod, err); outcome {
		case BindPodGone:
			l.SettleAll(d.UID)
			return outcome, nil
		case BindNotBound:
			l.Settle(d.UID, d.Assignment)
			return outcome, pod
		case BindBound:
			return outcome, pod
		}
		if ctx.Err() != nil {
			return BindUnknown, nil
		}
	}
}
