package defrag

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// reasonMigrated is the reason of the event on each pod a plan evicts.
const reasonMigrated = "Migrated"

// The annotations of a Migrated event: the plan that moved the pod, and
// the node the pod left. The hourly limits are counted from them.
const (
	eventAnnotationPlan = "gpusched.io/plan"
	eventAnnotationFrom = "gpusched.io/moved-from"
)

// recentMoves are the pods this defragmenter (its plans' ID prefix) moved
// in the hour before now, read from their Migrated events: what the hourly
// limits count, so that a new instance (after a restart or a change of
// leader) does not start them again from zero. The API server keeps events
// for an hour by default (--event-ttl); a cluster that keeps them less
// lets the limits forget sooner, and an event the recorder dropped is not
// counted.
func (d *Defragmenter) recentMoves(ctx context.Context, now time.Time) ([]move, error) {
	var out []move
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reasonMigrated).String(), Limit: 500}
	for {
		events, err := d.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("reading the moves of the last hour (Migrated events): %w", err)
		}
		for i := range events.Items {
			ev := &events.Items[i]
			if ev.Reason != reasonMigrated || !strings.HasPrefix(ev.Annotations[eventAnnotationPlan], d.prefix()) {
				continue // another defragmenter's, or not a defragmenter's at all
			}
			// An event stamped ahead of this clock (another replica's,
			// its clock ahead) is as recent as can be: counted now.
			at := eventTime(ev)
			if at.After(now) {
				at = now
			}
			if now.Sub(at) >= time.Hour {
				continue
			}
			for range max(1, ev.Count) {
				out = append(out, move{at: at, node: ev.Annotations[eventAnnotationFrom], namespace: ev.InvolvedObject.Namespace})
			}
		}
		if opts.Continue = events.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}

// eventTime is when an event last happened.
func eventTime(ev *v1.Event) time.Time {
	at := ev.LastTimestamp.Time
	if ev.EventTime.After(at) {
		at = ev.EventTime.Time
	}
	if at.IsZero() {
		at = ev.CreationTimestamp.Time
	}
	return at
}
