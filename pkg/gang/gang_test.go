package gang

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

const a100 = "NVIDIA-A100-SXM4-80GB"

func whole(n int) gpu.Demand { return gpu.Demand{Count: n, Milli: gpu.MilliPerGPU} }

func repeat(d gpu.Demand, n int) []gpu.Demand {
	out := make([]gpu.Demand, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestFitEmpty(t *testing.T) {
	twoNodes := []*v1.Node{
		gt.MakeGPUNode("n0").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("n1").GFD(a100, 8, 81920).Obj(),
	}
	tests := []struct {
		name      string
		nodes     []*v1.Node
		demands   []gpu.Demand
		minMember int
		placed    int
		fits      bool
	}{
		{name: "4 pods of 4 GPUs fill two 8-GPU nodes", nodes: twoNodes, demands: repeat(whole(4), 4), minMember: 4, placed: 4, fits: true},
		{name: "5 pods of 4 GPUs: one too many", nodes: twoNodes, demands: repeat(whole(4), 5), minMember: 5, placed: 4},
		// 3 pods of 6 GPUs: one per node, the third finds 2 free GPUs on each node and no node with 6.
		{name: "3 pods of 6 GPUs: 18 GPUs of 16, and no node has 6 left after the first two", nodes: twoNodes, demands: repeat(whole(6), 3), minMember: 3, placed: 2},
		{name: "9 GPUs on one pod never fit an 8-GPU node", nodes: twoNodes, demands: []gpu.Demand{whole(9)}, minMember: 1, placed: 0},
		{name: "only the minMember smallest pods must fit", nodes: twoNodes, demands: []gpu.Demand{whole(9), whole(8), whole(8)}, minMember: 2, placed: 2, fits: true},
		// Shares: four pods of 600 milli need four GPUs (two cannot share one), the cluster has 16.
		{name: "shares of one GPU", nodes: twoNodes, demands: repeat(gpu.Demand{Count: 1, Milli: 600}, 4), minMember: 4, placed: 4, fits: true},
		{name: "pods without GPUs count as placed", nodes: nil, demands: repeat(gpu.Demand{}, 3), minMember: 3, placed: 3, fits: true},
		// One 8-GPU node and two 4-GPU nodes: the 8-GPU node takes two pods, each 4-GPU node one.
		{name: "nodes of two shapes", nodes: []*v1.Node{
			gt.MakeGPUNode("big").GFD(a100, 8, 81920).Obj(),
			gt.MakeGPUNode("small-0").GFD(a100, 4, 81920).Obj(),
			gt.MakeGPUNode("small-1").GFD(a100, 4, 81920).Obj(),
		}, demands: repeat(whole(4), 5), minMember: 5, placed: 4},
		{name: "no GPU nodes", nodes: []*v1.Node{gt.MakeGPUNode("cpu").Obj()}, demands: repeat(whole(1), 2), minMember: 2, placed: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FitEmpty(Cluster{Nodes: tt.nodes}, tt.demands, tt.minMember)
			if got.Placed != tt.placed || got.Fits() != tt.fits {
				t.Errorf("placed %d, fits %v; want %d, %v (%s)", got.Placed, got.Fits(), tt.placed, tt.fits, got.Reason())
			}
		})
	}
}

func TestFitEmptyReason(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("n0").GFD(a100, 8, 81920).Obj()}
	got := FitEmpty(Cluster{Nodes: nodes}, repeat(whole(4), 3), 3).Reason()
	want := "gang needs 3 pods placed together but even with every GPU free only 2 fit (the gang asks for 12 GPUs, the cluster has 8 GPUs)"
	if got != want {
		t.Errorf("reason\n got %q\nwant %q", got, want)
	}
}

func TestLess(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	tests := []struct {
		name string
		a, b SortKey
		want bool
	}{
		{"higher priority first", SortKey{Priority: 10, Since: t1}, SortKey{Priority: 1, Since: t0}, true},
		{"older gang first", SortKey{Since: t0, Group: "ns/b", Enqueued: t1}, SortKey{Since: t1, Group: "ns/a", Enqueued: t0}, true},
		{"gangs of the same age stay apart by name", SortKey{Since: t0, Group: "ns/a", Enqueued: t1}, SortKey{Since: t0, Group: "ns/b", Enqueued: t0}, true},
		{"within a gang, the older pod first", SortKey{Since: t0, Group: "ns/a", Enqueued: t0, Pod: "ns/z"}, SortKey{Since: t0, Group: "ns/a", Enqueued: t1, Pod: "ns/a"}, true},
		{"same time: by pod name", SortKey{Since: t0, Group: "ns/a", Enqueued: t0, Pod: "ns/p1"}, SortKey{Since: t0, Group: "ns/a", Enqueued: t0, Pod: "ns/p2"}, true},
		{"a pod is not less than itself", SortKey{Since: t0, Pod: "ns/p"}, SortKey{Since: t0, Pod: "ns/p"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Less(tt.a, tt.b); got != tt.want {
				t.Errorf("Less = %v, want %v", got, tt.want)
			}
			if tt.want && Less(tt.b, tt.a) {
				t.Error("Less holds both ways")
			}
		})
	}
}

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		c    Counts
		want podgroup.Phase
	}{
		{Counts{Total: 2}, podgroup.PhasePending},
		{Counts{Total: 4}, podgroup.PhasePreScheduling},
		{Counts{Total: 4, Reserved: 2}, podgroup.PhaseScheduling},
		{Counts{Total: 4, Reserved: 1, Bound: 3}, podgroup.PhaseScheduling},
		{Counts{Total: 4, Bound: 4}, podgroup.PhaseScheduled},
		{Counts{Total: 4, Bound: 4, Running: 4}, podgroup.PhaseRunning},
		{Counts{Total: 4, Bound: 4, Succeeded: 4}, podgroup.PhaseFinished},
		{Counts{Total: 4, Bound: 4, Running: 3, Failed: 1}, podgroup.PhaseFailed},
	}
	for _, tt := range tests {
		if got := PhaseOf(4, tt.c); got != tt.want {
			t.Errorf("PhaseOf(4, %+v) = %s, want %s", tt.c, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBackoff(func() time.Time { return now })
	if _, ok := b.Until("ns/g"); ok {
		t.Fatal("a gang backs off before it was released")
	}
	until, started := b.Start("ns/g", 2*time.Second)
	if !started || !until.Equal(now.Add(2*time.Second)) {
		t.Fatalf("Start = %v, %v", until, started)
	}
	now = now.Add(time.Second)
	if again, started := b.Start("ns/g", 2*time.Second); started || !again.Equal(until) {
		t.Errorf("a second release during the wait extended it: %v, %v", again, started)
	}
	if got, ok := b.Until("ns/g"); !ok || !got.Equal(until) {
		t.Errorf("Until = %v, %v", got, ok)
	}
	now = now.Add(time.Second)
	if _, ok := b.Until("ns/g"); ok {
		t.Error("the wait did not end on time")
	}
	if _, started := b.Start("ns/g", 0); started {
		t.Error("a zero back-off started a wait")
	}
}

func TestReservations(t *testing.T) {
	r := NewReservations()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if since := r.Add("ns/g", "u1", "n0", t0); !since.Equal(t0) {
		t.Errorf("since = %v", since)
	}
	if since := r.Add("ns/g", "u2", "n1", t0.Add(time.Second)); !since.Equal(t0) {
		t.Errorf("the second reservation moved the gang's start: %v", since)
	}
	if got := r.Of("ns/g"); len(got) != 2 || got["u2"] != "n1" {
		t.Errorf("Of = %v", got)
	}
	if since, ok := r.Since("ns/g"); !ok || !since.Equal(t0) {
		t.Errorf("Since = %v, %v", since, ok)
	}
	r.Remove("u1")
	r.Remove("u2")
	if _, ok := r.Since("ns/g"); ok {
		t.Error("a gang without reservations has a start")
	}
	r.Remove("unknown")
	if got := r.Of("ns/g"); len(got) != 0 {
		t.Errorf("after Remove: %v", got)
	}
	if since := r.Add("ns/g", "u3", "n0", t0.Add(time.Minute)); !since.Equal(t0.Add(time.Minute)) {
		t.Errorf("a released gang kept its old start: %v", since)
	}
}
