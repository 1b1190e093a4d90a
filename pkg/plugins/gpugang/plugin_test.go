package gpugang

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// TestNewRejectsBadArgs: invalid args stop the scheduler at startup with the
// field, the value and what is allowed.
func TestNewRejectsBadArgs(t *testing.T) {
	tests := []struct {
		name string
		args runtime.Object
		want string
	}{
		{"zero timeout", &config.GPUGangArgs{ScheduleTimeoutSeconds: 0, BackoffSeconds: 1},
			"scheduleTimeoutSeconds: Invalid value: 0: must be from 1 to 900"},
		{"bad topology key", &config.GPUGangArgs{ScheduleTimeoutSeconds: 5, BackoffSeconds: 1, TopologyKey: "a b"},
			`topologyKey: Invalid value: "a b"`},
		{"wrong type", &config.GPUPlacementArgs{}, "want args of type GPUGangArgs, got *config.GPUPlacementArgs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), tt.args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(node string, phase v1.PodPhase) v1.Pod {
		return v1.Pod{Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Phase: phase}}
	}
	pg := &podgroup.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: podgroup.Spec{MinMember: 2}}
	tests := []struct {
		name     string
		pods     []v1.Pod
		reserved int
		want     podgroup.Status
	}{
		{"one pod", []v1.Pod{pod("", v1.PodPending)}, 0, podgroup.Status{Phase: podgroup.PhasePending}},
		{"two waiting at Permit", []v1.Pod{pod("", v1.PodPending), pod("", v1.PodPending)}, 2,
			podgroup.Status{Phase: podgroup.PhaseScheduling, ScheduleStartTime: &metav1.Time{Time: now}}},
		{"bound", []v1.Pod{pod("n0", v1.PodPending), pod("n1", v1.PodPending)}, 0,
			podgroup.Status{Phase: podgroup.PhaseScheduled, Scheduled: 2, ScheduleStartTime: &metav1.Time{Time: now}}},
		{"running", []v1.Pod{pod("n0", v1.PodRunning), pod("n1", v1.PodRunning)}, 0,
			podgroup.Status{Phase: podgroup.PhaseRunning, Scheduled: 2, Running: 2, ScheduleStartTime: &metav1.Time{Time: now}}},
		{"one failed", []v1.Pod{pod("n0", v1.PodRunning), pod("n1", v1.PodFailed)}, 0,
			podgroup.Status{Phase: podgroup.PhaseFailed, Scheduled: 1, Running: 1, Failed: 1, ScheduleStartTime: &metav1.Time{Time: now}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statusOf(pg, tt.pods, tt.reserved, now)
			if !statusEqual(got, tt.want) || (got.ScheduleStartTime != nil && !got.ScheduleStartTime.Time.Equal(now)) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestNeedsWrite: a status is written when it differs from the cached
// PodGroup's, and also when it equals the cached one but differs from a
// patch the cache does not hold yet: the gang's pods were bound (patched
// "scheduled 1"), then deleted before the cache saw that patch; without the
// second write the PodGroup would say "scheduled 1" for good.
func TestNeedsWrite(t *testing.T) {
	pending := podgroup.Status{Phase: podgroup.PhasePending}
	scheduled := podgroup.Status{Phase: podgroup.PhaseScheduled, Scheduled: 1}
	tests := []struct {
		name           string
		cached, status podgroup.Status
		last           *lastWrite
		want           bool
	}{
		{"unchanged", pending, pending, nil, false},
		{"changed", pending, scheduled, nil, true},
		{"patched, cache behind, pods gone again", pending, pending, &lastWrite{status: scheduled}, true},
		{"patched, cache behind, same status", pending, scheduled, &lastWrite{status: scheduled}, true},
		{"patched to what the cache holds", scheduled, scheduled, &lastWrite{status: scheduled}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := needsWrite(tt.cached, tt.last, tt.status); got != tt.want {
				t.Errorf("needsWrite(cached %+v, last %+v, %+v) = %t, want %t", tt.cached, tt.last, tt.status, got, tt.want)
			}
		})
	}
}

// TestStatusPatch: the patch sets every count, 0 included, since a merge
// patch leaves out fields alone: the gang was "scheduled 3", its pods were
// deleted, and the status must say 0.
func TestStatusPatch(t *testing.T) {
	patch, err := statusPatch(podgroup.Status{Phase: podgroup.PhasePending})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"failed":0,"phase":"Pending","running":0,"scheduled":0,"succeeded":0}}`
	if string(patch) != want {
		t.Errorf("patch %s, want %s", patch, want)
	}
}

// TestStatusWaitsForTheScheduler: an instance that has not scheduled (a
// standby replica, whose informers run) queues no PodGroup status; its
// first PreFilter queues every cached gang's, once; after that a pod's
// event queues its gang's status only when the pod names this profile.
func TestStatusWaitsForTheScheduler(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, name := range []string{"a", "b"} {
		pg := &unstructured.Unstructured{}
		pg.SetAPIVersion(podgroup.Group + "/" + podgroup.Version)
		pg.SetKind(podgroup.Kind)
		pg.SetNamespace("ml")
		pg.SetName(name)
		if err := indexer.Add(pg); err != nil {
			t.Fatal(err)
		}
	}
	p := &GPUGang{podGroups: cache.NewGenericLister(indexer, podgroup.Resource.GroupResource()), profile: "gpusched"}
	p.status = newStatusWriter(p)
	defer p.status.queue.ShutDown()
	pod := func(name, scheduler string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Labels: map[string]string{podgroup.LabelPodGroup: "c"}},
			Spec: v1.PodSpec{SchedulerName: scheduler}}
	}
	handler := p.podHandler()

	handler.OnAdd(pod("c-0", "gpusched"), false)
	if n := p.status.queue.Len(); n != 0 {
		t.Fatalf("before scheduling: %d statuses queued, want 0", n)
	}
	p.activate()
	p.activate()
	if n := p.status.queue.Len(); n != 2 {
		t.Fatalf("after the first PreFilter: %d statuses queued, want 2 (ml/a, ml/b)", n)
	}
	handler.OnAdd(pod("c-1", "another-scheduler"), false)
	if n := p.status.queue.Len(); n != 2 {
		t.Fatalf("a pod of another scheduler queued its gang's status: %d queued, want 2", n)
	}
	handler.OnAdd(pod("c-2", "gpusched"), false)
	if n := p.status.queue.Len(); n != 3 {
		t.Fatalf("a pod of this profile: %d queued, want 3 (ml/c too)", n)
	}
}
