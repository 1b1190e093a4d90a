package testcluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// PollInterval is how often the Wait* helpers re-read the API server.
const PollInterval = 100 * time.Millisecond

// WaitForPodScheduled polls until pod ns/name has a non-empty spec.nodeName
// and returns the pod as last read. It fails the test (t.Fatalf) if that does
// not happen within timeout or ctx ends first; the failure message includes
// the pod's PodScheduled condition, which carries the scheduler's reason.
func WaitForPodScheduled(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, timeout time.Duration) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err // transient or not-yet-created: keep polling
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("testcluster: pod %s/%s not scheduled within %v: %v (last get error: %v; %s)",
			ns, name, timeout, err, lastErr, scheduledCondition(pod))
	}
	return pod
}

// AssertPodNotScheduled checks pod ns/name repeatedly for the whole duration
// and fails the test as soon as it has a spec.nodeName. It returns the pod as
// last read. Use it to show that no scheduler binds a pod (for example while
// the scheduler is stopped, or because every node is filtered out).
func AssertPodNotScheduled(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, duration time.Duration) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	deadline := time.Now().Add(duration)
	for {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("testcluster: getting pod %s/%s: %v", ns, name, err)
		}
		pod = p
		if p.Spec.NodeName != "" {
			t.Fatalf("testcluster: pod %s/%s was bound to node %q, expected it to stay unscheduled", ns, name, p.Spec.NodeName)
		}
		if !time.Now().Before(deadline) {
			return pod
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testcluster: context ended while watching pod %s/%s: %v", ns, name, ctx.Err())
		case <-time.After(PollInterval):
		}
	}
}

func scheduledCondition(pod *v1.Pod) string {
	if pod == nil {
		return "pod never read"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return fmt.Sprintf("PodScheduled=%s reason=%q message=%q", c.Status, c.Reason, c.Message)
		}
	}
	return "no PodScheduled condition"
}

// WaitForPodEvent polls until an event with the given reason (for example
// "FailedScheduling" or "Scheduled") exists for the pod ns/podName and
// returns the newest one. It fails the test on timeout.
//
// Events are looked up through both the core/v1 and the events.k8s.io/v1
// API, so it does not matter which one the recorder used (the scheduler uses
// events.k8s.io/v1). An events.k8s.io/v1 event is returned converted to
// core/v1 form: Note becomes Message, Regarding becomes InvolvedObject, and
// Series is carried over.
//
// Events are matched by involved object kind Pod and name, not UID, so
// events of an earlier pod with the same name also match. Note that the
// events.k8s.io recorder folds repeats of an identical event into a series
// and updates its count only periodically, so the message is that of the
// first occurrence in a series.
func WaitForPodEvent(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, podName, reason string, timeout time.Duration) *v1.Event {
	t.Helper()
	var newest *v1.Event
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		candidates, err := podEvents(ctx, client, ns, podName, reason)
		if err != nil {
			lastErr = err
			return false, nil
		}
		for _, ev := range candidates {
			if newest == nil || eventLastSeen(ev).After(eventLastSeen(newest)) {
				newest = ev
			}
		}
		return newest != nil, nil
	})
	if err != nil {
		t.Fatalf("testcluster: no %q event for pod %s/%s within %v: %v (last list error: %v)", reason, ns, podName, timeout, err, lastErr)
	}
	return newest
}

// podEvents lists the events with the given reason for pod ns/podName via
// both event APIs, de-duplicated by UID. It fails only if both lists fail.
func podEvents(ctx context.Context, client kubernetes.Interface, ns, podName, reason string) ([]*v1.Event, error) {
	seen := map[types.UID]bool{}
	var out []*v1.Event
	add := func(ev *v1.Event) {
		if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != podName || ev.Reason != reason {
			return
		}
		if ev.UID != "" && seen[ev.UID] {
			return
		}
		seen[ev.UID] = true
		out = append(out, ev)
	}

	coreList, coreErr := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if coreErr == nil {
		for i := range coreList.Items {
			add(&coreList.Items[i])
		}
	}
	newList, newErr := client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if newErr == nil {
		for i := range newList.Items {
			add(fromEventsV1(&newList.Items[i]))
		}
	}
	if coreErr != nil && newErr != nil {
		if apierrors.IsNotFound(newErr) {
			return nil, fmt.Errorf("listing core/v1 events: %w", coreErr)
		}
		return nil, fmt.Errorf("listing events: core/v1: %w; events.k8s.io/v1: %w", coreErr, newErr)
	}
	return out, nil
}

// fromEventsV1 converts an events.k8s.io/v1 Event to its core/v1 form.
func fromEventsV1(e *eventsv1.Event) *v1.Event {
	ev := &v1.Event{
		ObjectMeta:          e.ObjectMeta,
		InvolvedObject:      e.Regarding,
		Related:             e.Related,
		Reason:              e.Reason,
		Message:             e.Note,
		Type:                e.Type,
		Action:              e.Action,
		EventTime:           e.EventTime,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
	}
	if e.Series != nil {
		ev.Series = &v1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
		ev.Count = e.Series.Count
	}
	return ev
}

// eventLastSeen is the latest of the timestamps an event carries.
func eventLastSeen(ev *v1.Event) time.Time {
	latest := ev.CreationTimestamp.Time
	for _, ts := range []time.Time{ev.EventTime.Time, ev.FirstTimestamp.Time, ev.LastTimestamp.Time} {
		if ts.After(latest) {
			latest = ts
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(latest) {
		latest = ev.Series.LastObservedTime.Time
	}
	return latest
}

// CreateNode creates node and then writes its status, because the API
// server ignores .status on create. It does not modify the argument.
//
// Status handling: if only one of Capacity and Allocatable is set, the other
// is copied from it; a NodeReady condition with status True is set (replacing
// any Ready condition the caller supplied); other conditions are kept.
// Heartbeat and transition times are set to now. The stored node is returned.
// Any API error fails the test.
func CreateNode(ctx context.Context, t *testing.T, client kubernetes.Interface, node *v1.Node) *v1.Node {
	t.Helper()
	want := node.DeepCopy()
	status := want.Status
	if len(status.Allocatable) == 0 {
		status.Allocatable = status.Capacity.DeepCopy()
	}
	if len(status.Capacity) == 0 {
		status.Capacity = status.Allocatable.DeepCopy()
	}
	now := metav1.Now()
	conditions := []v1.NodeCondition{{
		Type:               v1.NodeReady,
		Status:             v1.ConditionTrue,
		Reason:             "KubeletReady",
		Message:            "testcluster: node marked ready",
		LastHeartbeatTime:  now,
		LastTransitionTime: now,
	}}
	for _, c := range status.Conditions {
		if c.Type != v1.NodeReady {
			conditions = append(conditions, c)
		}
	}
	status.Conditions = conditions

	created, err := client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testcluster: creating node %s: %v", node.Name, err)
	}
	var updated *v1.Node
	current := created
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil { // a previous attempt conflicted: re-read
			c, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			current = c
		}
		n := current.DeepCopy()
		n.Status = *status.DeepCopy()
		u, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			current = nil
			return err
		}
		updated = u
		return nil
	})
	if err != nil {
		t.Fatalf("testcluster: updating status of node %s: %v", node.Name, err)
	}
	return updated
}
