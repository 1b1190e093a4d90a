package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestBindRefused(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewNotFound(pods, "p"), true},
		{apierrors.NewForbidden(pods, "p", errors.New("no")), true},
		{apierrors.NewBadRequest("bad"), true},
		// client-go resends on 429: an earlier attempt may have been stored.
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, "p", nil), true},
		// "already assigned" may answer a resend of the very write that was stored.
		{apierrors.NewConflict(pods, "p", errors.New("already assigned")), false},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewTimeoutError("slow", 1), false},
		{apierrors.NewServiceUnavailable("restarting"), false},
		{errors.New("connection reset by peer"), false},
		{fmt.Errorf("binding: %w", apierrors.NewForbidden(pods, "p", errors.New("no"))), true},
	} {
		if got := gpu.BindRefused(tc.err); got != tc.want {
			t.Errorf("BindRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestClassifyBind(t *testing.T) {
	a := gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 1000}
	other := gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}
	pod := func() *gt.PodWrapper { return gt.MakeGPUPod("p").UID("u1") }
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		err  error
		want gpu.BindOutcome
	}{
		{"bound with a", pod().Node("n").Assigned(a).Obj(), nil, gpu.BindBound},
		{"unbound, PreBind's annotation on it", pod().Assigned(a).Obj(), nil, gpu.BindNotBound},
		{"unbound", pod().Obj(), nil, gpu.BindNotBound},
		{"bound with other GPUs", pod().Node("n").Assigned(other).Obj(), nil, gpu.BindNotBound},
		{"bound to another node", pod().Node("m").Assigned(gpu.Assignment{Node: "m", Devices: []int{1}, Milli: 1000}).Obj(), nil, gpu.BindNotBound},
		{"replaced under its name", gt.MakeGPUPod("p").UID("u2").Node("n").Assigned(a).Obj(), nil, gpu.BindPodGone},
		{"deleted", nil, notFound, gpu.BindPodGone},
		{"the read failed", nil, errors.New("connection refused"), gpu.BindUnknown},
	} {
		if got := gpu.ClassifyBind("u1", a, tc.pod, tc.err); got != tc.want {
			t.Errorf("%s: ClassifyBind = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// settleFixture is a ledger holding, in doubt, pod u1's whole GPU 1 of a
// two-GPU node.
func settleFixture(t *testing.T) (*gpu.Ledger, *podCache, *v1.Node, gpu.Assignment) {
	t.Helper()
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	cache.view(l, node)
	a := gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 1000}
	if err := l.Assume("u1", a); err != nil {
		t.Fatal(err)
	}
	l.Doubt("u1")
	l.Forget("u1")
	if got := usedMilli(cache.view(l, node)); got[1] != 1000 {
		t.Fatalf("in doubt: used %v, want GPU 1 held", got)
	}
	return l, cache, node, a
}

// SettleBind reads nothing before NotBefore: until then the write may
// still commit, and a read finding the pod unbound proves nothing.
func TestSettleBindWaitsForNotBefore(t *testing.T) {
	l, cache, node, a := settleFixture(t)
	var readAt time.Time
	read := func(context.Context) (*v1.Pod, error) {
		readAt = time.Now()
		return gt.MakeGPUPod("p").UID("u1").Obj(), nil // unbound
	}
	notBefore := time.Now().Add(300 * time.Millisecond)
	outcome, _ := l.SettleBind(context.Background(), gpu.BindInDoubt{UID: "u1", Assignment: a, NotBefore: notBefore}, read)
	if outcome != gpu.BindNotBound {
		t.Fatalf("outcome %v, want not bound", outcome)
	}
	if readAt.Before(notBefore) {
		t.Errorf("read %v before NotBefore", notBefore.Sub(readAt))
	}
	if got := usedMilli(cache.view(l, node)); got[1] != 0 {
		t.Errorf("settled not bound: used %v, want GPU 1 free", got)
	}
}

// A read that fails is retried; the GPUs stay held meanwhile, and still
// when the caller gives up.
func TestSettleBindRetriesReads(t *testing.T) {
	l, cache, node, a := settleFixture(t)
	reads := 0
	read := func(context.Context) (*v1.Pod, error) {
		reads++
		if reads < 3 {
			if got := usedMilli(cache.view(l, node)); got[1] != 1000 {
				t.Errorf("read %d failed, yet GPU 1 is released: used %v", reads, got)
			}
			return nil, errors.New("connection refused")
		}
		return gt.MakeGPUPod("p").UID("u1").Node("n").Assigned(a).Obj(), nil
	}
	outcome, pod := l.SettleBind(context.Background(), gpu.BindInDoubt{UID: "u1", Assignment: a}, read)
	if outcome != gpu.BindBound || pod == nil || reads != 3 {
		t.Fatalf("outcome %v after %d reads, want bound after 3", outcome, reads)
	}
	// Bound: the doubt stays until the pod shows up among the node's pods.
	if got := usedMilli(cache.view(l, node)); got[1] != 1000 {
		t.Errorf("bound: used %v, want GPU 1 held", got)
	}

	l2, cache2, node2, a2 := settleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	down := func(context.Context) (*v1.Pod, error) { return nil, errors.New("connection refused") }
	if outcome, _ := l2.SettleBind(ctx, gpu.BindInDoubt{UID: "u1", Assignment: a2}, down); outcome != gpu.BindUnknown {
		t.Errorf("API server down: outcome %v, want unknown", outcome)
	}
	if got := usedMilli(cache2.view(l2, node2)); got[1] != 1000 {
		t.Errorf("unknown: used %v, want GPU 1 still held", got)
	}
}

// A pod deleted or replaced ends every doubt of its UID.
func TestSettleBindPodGone(t *testing.T) {
	for _, read := range []func(context.Context) (*v1.Pod, error){
		func(context.Context) (*v1.Pod, error) {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
		},
		func(context.Context) (*v1.Pod, error) { return gt.MakeGPUPod("p").UID("u2").Obj(), nil },
	} {
		l, cache, node, a := settleFixture(t)
		if outcome, _ := l.SettleBind(context.Background(), gpu.BindInDoubt{UID: "u1", Assignment: a}, read); outcome != gpu.BindPodGone {
			t.Errorf("outcome %v, want pod gone", outcome)
		}
		if got := usedMilli(cache.view(l, node)); got[1] != 0 {
			t.Errorf("gone: used %v, want GPU 1 free", got)
		}
	}
}
