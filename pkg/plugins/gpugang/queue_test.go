package gpugang

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// TestLess orders real queued pods: by priority, then by the age of their
// gang's PodGroup (not the pods' own), then the pods of one gang together.
func TestLess(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for name, created := range map[string]time.Time{"old": t0, "new": t0.Add(time.Hour)} {
		pg := &unstructured.Unstructured{}
		pg.SetAPIVersion(podgroup.Group + "/" + podgroup.Version)
		pg.SetKind(podgroup.Kind)
		pg.SetNamespace("ml")
		pg.SetName(name)
		pg.SetCreationTimestamp(metav1.NewTime(created))
		if err := indexer.Add(pg); err != nil {
			t.Fatal(err)
		}
	}
	p := &GPUGang{podGroups: cache.NewGenericLister(indexer, podgroup.Resource.GroupResource())}

	queued := func(name, group string, priority int32, enqueued time.Time) *framework.QueuedPodInfo {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Labels: map[string]string{}}, Spec: v1.PodSpec{Priority: &priority}}
		if group != "" {
			pod.Labels[podgroup.LabelPodGroup] = group
		}
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			t.Fatal(err)
		}
		return &framework.QueuedPodInfo{PodInfo: pi, QueueingParams: framework.QueueingParams{Timestamp: enqueued}}
	}
	later := t0.Add(2 * time.Hour)
	orphan := queued("orphan", "missing", 0, later)
	orphan.Pod.CreationTimestamp = metav1.NewTime(t0.Add(30 * time.Minute))
	tests := []struct {
		name string
		a, b *framework.QueuedPodInfo
		want bool
	}{
		{"a pod of the old gang, queued late, before a pod of the new gang queued early",
			queued("old-1", "old", 0, later.Add(time.Minute)), queued("new-0", "new", 0, later), true},
		{"priority first", queued("new-0", "new", 10, later), queued("old-0", "old", 0, later), true},
		{"the old gang before a single pod queued after it was created", queued("old-0", "old", 0, later), queued("single", "", 0, t0.Add(time.Minute)), true},
		{"a single pod queued before the new gang was created goes first", queued("single", "", 0, t0.Add(time.Minute)), queued("new-0", "new", 0, later), true},
		{"within a gang, by time in the queue", queued("old-0", "old", 0, later), queued("old-1", "old", 0, later.Add(time.Second)), true},
		{"a gang without its PodGroup yet counts from its pod's creation", orphan, queued("new-0", "new", 0, later), true},
		{"... which is after the old gang's", queued("old-0", "old", 0, later), orphan, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Less(tt.a, tt.b); got != tt.want {
				t.Errorf("Less = %v, want %v", got, tt.want)
			}
			if tt.want && p.Less(tt.b, tt.a) {
				t.Error("Less holds both ways")
			}
		})
	}
}

// TestClaimAddedQueuesItsGang: a ResourceClaim made for a pod of a gang
// queues the gang's waiting pods (PreFilter may have waited for it); a
// claim of another pod, or in another namespace, does not.
func TestClaimAddedQueuesItsGang(t *testing.T) {
	inGang := func(name, group string) *v1.Pod {
		p := gt.MakeGPUPod(name).UID(name).Obj()
		if group != "" {
			p.Labels = map[string]string{podgroup.LabelPodGroup: group}
		}
		return p
	}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{groupIndex: groupOfObject})
	for _, p := range []*v1.Pod{inGang("a", "g"), inGang("b", "g"), inGang("x", "other")} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	p := &GPUGang{pods: pods}
	claim := func(namespace, owner string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: namespace,
			OwnerReferences: []metav1.OwnerReference{{Kind: "Pod", Name: owner, UID: types.UID(owner)}}}}
	}
	for _, tt := range []struct {
		name  string
		pod   *v1.Pod
		claim *resourceapi.ResourceClaim
		want  fwk.QueueingHint
	}{
		{"a claim of another member", inGang("b", "g"), claim("default", "a"), fwk.Queue},
		{"a claim of a pod of another gang", inGang("b", "g"), claim("default", "x"), fwk.QueueSkip},
		{"a claim in another namespace", inGang("b", "g"), claim("other", "a"), fwk.QueueSkip},
		{"a pod outside any gang", inGang("y", ""), claim("default", "a"), fwk.QueueSkip},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.isSchedulableAfterClaimAdded(klog.Background(), tt.pod, nil, tt.claim)
			if err != nil || got != tt.want {
				t.Errorf("hint %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
