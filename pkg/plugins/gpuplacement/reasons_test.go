package gpuplacement

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestWithoutReason checks which pods the reason keeper hands back to the
// active queue: only old enough, unbound, live, ungated, non-waiting pods
// without a PodScheduled condition.
func TestWithoutReason(t *testing.T) {
	now := time.Now()
	cutoff := now.Add(-reasonSweepEvery)
	pod := func(name string, age time.Duration, edit func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(now.Add(-age)),
		}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	unschedulable := v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable}
	pods := []*v1.Pod{
		pod("lost", time.Minute, nil),
		pod("young", time.Second, nil),
		pod("says-why", time.Minute, func(p *v1.Pod) { p.Status.Conditions = []v1.PodCondition{unschedulable} }),
		pod("bound", time.Minute, func(p *v1.Pod) { p.Spec.NodeName = "n" }),
		pod("gated", time.Minute, func(p *v1.Pod) { p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "g"}} }),
		pod("deleting", time.Minute, func(p *v1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }),
		pod("finished", time.Minute, func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }),
		pod("waiting", time.Minute, nil),
		pod("lost-too", time.Hour, nil),
	}
	waiting := func(p *v1.Pod) bool { return p.Name == "waiting" }

	var got []string
	for key := range withoutReason(pods, cutoff, waiting) {
		got = append(got, key)
	}
	slices.Sort(got)
	if want := []string{"default/lost", "default/lost-too"}; !slices.Equal(got, want) {
		t.Errorf("pods handed back = %v, want %v", got, want)
	}
	if lost := withoutReason(pods[1:3], cutoff, waiting); lost != nil {
		t.Errorf("with no pod missing a reason: %v, want nil", lost)
	}
}

// TestPendingGPUPods checks which pods go back to the active queue once
// GPUs held in doubt are released: unbound, live, ungated, non-waiting
// pods that ask for GPUs or hold DRA claims, with or without a reason.
func TestPendingGPUPods(t *testing.T) {
	pod := func(name string, edit func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	wholeGPU := func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	}
	share := func(p *v1.Pod) { p.Annotations = map[string]string{gpu.AnnotationMilli: "250"} }
	unschedulable := v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable}
	pods := []*v1.Pod{
		pod("whole", func(p *v1.Pod) { wholeGPU(p); p.Status.Conditions = []v1.PodCondition{unschedulable} }),
		pod("share", share),
		pod("claim", func(p *v1.Pod) { p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}} }),
		pod("cpu-only", nil),
		pod("bound", func(p *v1.Pod) { wholeGPU(p); p.Spec.NodeName = "n" }),
		pod("gated", func(p *v1.Pod) { wholeGPU(p); p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "g"}} }),
		pod("deleting", func(p *v1.Pod) { wholeGPU(p); p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }),
		pod("finished", func(p *v1.Pod) { wholeGPU(p); p.Status.Phase = v1.PodFailed }),
		pod("waiting", wholeGPU),
		pod("malformed", func(p *v1.Pod) { p.Annotations = map[string]string{gpu.AnnotationMilli: "lots"} }),
	}
	waiting := func(p *v1.Pod) bool { return p.Name == "waiting" }
	var got []string
	for key := range pendingGPUPods(pods, waiting) {
		got = append(got, key)
	}
	slices.Sort(got)
	if want := []string{"default/claim", "default/share", "default/whole"}; !slices.Equal(got, want) {
		t.Errorf("pods handed back = %v, want %v", got, want)
	}
	if pending := pendingGPUPods(pods[3:5], waiting); pending != nil {
		t.Errorf("with no pending GPU pod: %v, want nil", pending)
	}
}
