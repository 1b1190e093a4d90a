package defrag

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRecentMoves: a new instance counts the moves of the last hour from
// its own plans' Migrated events (their plan and node annotations), one
// stamped ahead of its clock included, and nothing else: not an older one,
// not another defragmenter's, not another reason's.
func TestRecentMoves(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	event := func(name, namespace, reason, plan, from string, ago time.Duration) *v1.Event {
		ev := &v1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Reason: reason,
			InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: name}, LastTimestamp: metav1.NewTime(now.Add(-ago))}
		if plan != "" {
			ev.Annotations = map[string]string{eventAnnotationPlan: plan, eventAnnotationFrom: from}
		}
		return ev
	}
	client := fake.NewClientset(
		event("a", "team", reasonMigrated, "gpusched-defragmenter/20261130t113000-1", "n1", 30*time.Minute),
		event("b", "ml", reasonMigrated, "gpusched-defragmenter/20261130t115900-2", "n2", time.Minute),
		event("old", "team", reasonMigrated, "gpusched-defragmenter/20261130t105000-1", "n1", 70*time.Minute),
		event("other", "team", reasonMigrated, "another-defragmenter/20261130t115000-1", "n1", 10*time.Minute),
		event("dry", "team", "WouldMove", "", "", 5*time.Minute),
		event("ahead", "ml", reasonMigrated, "gpusched-defragmenter/20261130t120100-3", "n3", -time.Minute), // another replica's clock ahead
	)
	d := &Defragmenter{client: client, opts: Options{Name: "gpusched-defragmenter"}}
	moves, err := d.recentMoves(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, 0, len(moves))
	for _, m := range moves {
		got = append(got, m.namespace+"@"+m.node)
	}
	slices.Sort(got)
	if want := []string{"ml@n2", "ml@n3", "team@n1"}; !slices.Equal(got, want) {
		t.Errorf("moves %v, want %v", got, want)
	}
}
