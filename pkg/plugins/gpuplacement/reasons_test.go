package gpuplacement

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
