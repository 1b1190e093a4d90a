package gpugang

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// statusWriter keeps PodGroup status up to date. Scheduling calls only mark
// a gang dirty; one goroutine writes, coalescing every change of a gang into
// one patch, off the scheduling path.
type statusWriter struct {
	p     *GPUGang
	queue workqueue.TypedRateLimitingInterface[string]
	// last is the status each gang was last patched to (a *lastWrite by
	// gang key), until the PodGroup cache holds that patch.
	last sync.Map
}

// lastWrite is a status the writer patched onto a PodGroup, and the
// resourceVersion the patch returned.
type lastWrite struct {
	status  podgroup.Status
	version string
}

func newStatusWriter(p *GPUGang) *statusWriter {
	return &statusWriter{p: p, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpusched-podgroup-status"})}
}

// enqueue marks the gang key's status for an update, once the instance
// schedules (GPUGang.activate).
func (w *statusWriter) enqueue(key string) {
	if w.p.active.Load() {
		w.queue.Add(key)
	}
}

// forget drops what the writer keeps of a deleted gang.
func (w *statusWriter) forget(key string) { w.last.Delete(key) }

// writeNow writes the gang key's status at once, on the caller's goroutine,
// for a caller that is about to report what the status says. A failed write
// is left to the worker to retry.
func (w *statusWriter) writeNow(ctx context.Context, key string) {
	if err := w.write(ctx, key); err != nil {
		logger(ctx).V(2).Info("Updating PodGroup status failed; retrying", "podGroup", key, "err", err)
		w.queue.AddRateLimited(key)
	}
}

// run writes statuses until ctx ends.
func (w *statusWriter) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		key, quit := w.queue.Get()
		if quit {
			return
		}
		if err := w.write(ctx, key); err != nil {
			logger(ctx).V(2).Info("Updating PodGroup status failed; retrying", "podGroup", key, "err", err)
			w.queue.AddRateLimited(key)
		} else {
			w.queue.Forget(key)
		}
		w.queue.Done(key)
	}
}

// write sets the gang's status from its pods, as the API server has them
// (the scheduler's cache holds no terminated pods), and its reservations.
func (w *statusWriter) write(ctx context.Context, key string) error {
	namespace, name, _ := strings.Cut(key, "/")
	obj := w.p.podGroup(namespace, name)
	if obj == nil {
		w.last.Delete(key)
		return nil
	}
	pg, err := podgroup.FromUnstructured(obj)
	if err != nil || pg.Validate() != nil {
		return nil // PreFilter reports it
	}
	pods, err := w.p.handle.ClientSet().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: podgroup.LabelPodGroup + "=" + name})
	if err != nil {
		return fmt.Errorf("listing the pods of PodGroup %s: %w", key, err)
	}
	status := statusOf(pg, pods.Items, len(w.p.reservations.Of(key)), w.p.now())
	if !w.p.ownsAny(pods.Items) {
		return nil // the gang of another profile's pods: its instance writes
	}
	var last *lastWrite
	if l, ok := w.last.Load(key); ok {
		last = l.(*lastWrite)
		if last.version == obj.GetResourceVersion() {
			// The cache holds the patch. Not a newer entry stored since
			// by a write on another goroutine (writeNow).
			w.last.CompareAndDelete(key, l)
			last = nil
		}
	}
	if !needsWrite(pg.Status, last, status) {
		return nil
	}
	patch, err := statusPatch(status)
	if err != nil {
		return err
	}
	got, err := w.p.dynamic.Resource(podgroup.Resource).Namespace(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	w.last.Store(key, &lastWrite{status: status, version: got.GetResourceVersion()})
	return nil
}

// statusPatch is the merge patch that sets a PodGroup's status to status.
// The counts are written even when 0: podgroup.Status omits empty fields,
// and a merge patch without them would leave the old counts in place (a gang
// whose pods were deleted would say "scheduled 3" for good).
func statusPatch(status podgroup.Status) ([]byte, error) {
	fields := map[string]any{
		"phase":     status.Phase,
		"scheduled": status.Scheduled,
		"running":   status.Running,
		"succeeded": status.Succeeded,
		"failed":    status.Failed,
	}
	if status.OccupiedBy != "" {
		fields["occupiedBy"] = status.OccupiedBy
	}
	if status.ScheduleStartTime != nil {
		fields["scheduleStartTime"] = status.ScheduleStartTime
	}
	return json.Marshal(map[string]any{"status": fields})
}

// needsWrite says whether a PodGroup must be patched to status, given its
// status in the cache and the writer's last patch of it that the cache does
// not hold yet (nil if none). The cache lags the writer's own patches: a
// status that equals the cached one may still differ from the one last
// written (pods were bound, the patch said so, then they were deleted before
// the cache saw the patch), and skipping that write would leave the patched
// status in place for good, as status-only updates do not requeue the gang.
func needsWrite(cached podgroup.Status, last *lastWrite, status podgroup.Status) bool {
	if !statusEqual(cached, status) {
		return true
	}
	return last != nil && !statusEqual(last.status, status)
}

// ownsAny says whether the instance writes the status of a gang whose pods
// are pods: one of them is its profile's, or the gang has none left.
func (p *GPUGang) ownsAny(pods []v1.Pod) bool {
	if len(pods) == 0 {
		return true
	}
	for i := range pods {
		if p.ownsPod(&pods[i]) {
			return true
		}
	}
	return false
}

// statusOf is the status of pg whose pods are pods, reserved of them in
// flight in the scheduler.
func statusOf(pg *podgroup.PodGroup, pods []v1.Pod, reserved int, now time.Time) podgroup.Status {
	var c gang.Counts
	c.Reserved = reserved
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		c.Total++
		switch pod.Status.Phase {
		case v1.PodSucceeded:
			c.Succeeded++
			continue
		case v1.PodFailed:
			c.Failed++
			continue
		case v1.PodRunning:
			c.Running++
		}
		if pod.Spec.NodeName != "" {
			c.Bound++
		}
	}
	s := pg.Status
	s.Phase = gang.PhaseOf(int(pg.Spec.MinMember), c)
	s.Scheduled, s.Running, s.Succeeded, s.Failed = int32(c.Bound), int32(c.Running), int32(c.Succeeded), int32(c.Failed)
	if s.ScheduleStartTime == nil && c.Reserved+c.Bound > 0 {
		t := metav1.NewTime(now)
		s.ScheduleStartTime = &t
	}
	return s
}

func statusEqual(a, b podgroup.Status) bool {
	return a.Phase == b.Phase && a.Scheduled == b.Scheduled && a.Running == b.Running &&
		a.Succeeded == b.Succeeded && a.Failed == b.Failed && (a.ScheduleStartTime == nil) == (b.ScheduleStartTime == nil)
}

// recordEvent records an event on a PodGroup.
func (p *GPUGang) recordEvent(obj *unstructured.Unstructured, eventType, reason, note string) {
	if recorder := p.handle.EventRecorder(); recorder != nil && obj != nil {
		recorder.Eventf(obj, nil, eventType, reason, "Scheduling", note)
	}
}

// reportedOnce remembers which version of a PodGroup an event was recorded
// for, per reason, so that a gang retried every cycle records each problem
// once per change of its PodGroup.
type reportedOnce struct{ seen sync.Map }

// reportOnce records an event on the PodGroup once per resourceVersion and reason.
func (p *GPUGang) reportOnce(obj *unstructured.Unstructured, eventType, reason, note string) {
	id := string(obj.GetUID()) + "/" + reason
	if last, ok := p.reported.seen.Load(id); ok && last == obj.GetResourceVersion() {
		return
	}
	p.reported.seen.Store(id, obj.GetResourceVersion())
	p.recordEvent(obj, eventType, reason, note)
}
