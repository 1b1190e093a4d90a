package defrag

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// gangPlanFixture is nodes a, b and c (4 A100s each), movable shares m1
// on a and m2 on b, gang pods g0 and g1 (4 GPUs each), a defragmenter in
// Enforce started on them whose evictions of the pods named in refuse are
// refused, and the plans: g0 on a once m1 leaves for c GPU 0, g1 on b once
// m2 leaves for c GPU 1.
func gangPlanFixture(t *testing.T, ctx context.Context, now time.Time, refuse ...string) (*Defragmenter, *fake.Clientset, *record.FakeRecorder, *gpuview.Snapshot, []*v1.Pod, []gpu.Plan) {
	t.Helper()
	var objects []runtime.Object
	for _, name := range []string{"a", "b", "c"} {
		objects = append(objects, gt.MakeGPUNode(name).GFD("A100", 4, 81920).Obj())
	}
	moved := func(name, node string) *v1.Pod {
		return gt.MakeGPUPod(name).UID(name).Node(node).Milli(600).Assigned(gpu.Assignment{Node: node, Devices: []int{0}, Milli: 600}).
			OwnedBy("ReplicaSet", "infer", "rs-uid").Annotation(AnnotationMovable, "true").Obj()
	}
	pods := []*v1.Pod{moved("m1", "a"), moved("m2", "b"), gt.MakeGPUPod("g0").UID("g0").GPUs(4).Obj(), gt.MakeGPUPod("g1").UID("g1").GPUs(4).Obj()}
	for _, p := range pods {
		objects = append(objects, p)
	}
	client := fake.NewClientset(objects...)
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		if slices.Contains(refuse, action.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()) {
			return true, nil, errors.New("Cannot evict pod as it would violate the pod's disruption budget")
		}
		return true, nil, nil
	})
	recorder := record.NewFakeRecorder(100)
	d, err := New(client, recorder, NewMetrics(prometheus.NewRegistry()), Options{Mode: Enforce, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var nodes []*v1.Node
	for _, o := range objects[:3] {
		nodes = append(nodes, o.(*v1.Node))
	}
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	plans := []gpu.Plan{
		{Node: "a", Assignment: gpu.Assignment{Node: "a", Devices: []int{0, 1, 2, 3}, Milli: gpu.MilliPerGPU},
			Moves: []gpu.Move{{Pod: "m1", From: "a", To: gpu.Assignment{Node: "c", Devices: []int{0}, Milli: 600}}}},
		{Node: "b", Assignment: gpu.Assignment{Node: "b", Devices: []int{0, 1, 2, 3}, Milli: gpu.MilliPerGPU},
			Moves: []gpu.Move{{Pod: "m2", From: "b", To: gpu.Assignment{Node: "c", Devices: []int{1}, Milli: 600}}}},
	}
	return d, client, recorder, snap, pods, plans
}

// adoptedBy is the plan a new defragmenter adopts from the reservations
// on client's nodes, with the pods of client but those evicted.
func adoptedBy(t *testing.T, ctx context.Context, client *fake.Clientset, now time.Time, evicted ...string) *activePlan {
	t.Helper()
	next, err := New(client, record.NewFakeRecorder(100), NewMetrics(prometheus.NewRegistry()), Options{Mode: Enforce, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	var all []*v1.Node
	for i := range nodes.Items {
		all = append(all, &nodes.Items[i])
	}
	current, _ := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	var pods []*v1.Pod
	for i := range current.Items {
		if !slices.Contains(evicted, current.Items[i].Name) {
			pods = append(pods, &current.Items[i])
		}
	}
	next.adopt(ctx, all, pods, now)
	return next.active
}

// TestGangPlanStoppedByARefusedEviction carries out the plans of a gang of
// two (g0 on node a after m1 leaves it for c; g1 on node b after m2 leaves
// it for c) and refuses the second eviction, m2's. m1 was evicted: its
// replacement keeps its reservation on c. Everything else the plans
// reserved goes (both gang pods' and m2's), each gang pod is told the plan
// stopped, and the plan follows m1's replacement alone. Then a new
// instance adopts the plan from its reservations: m1's alone, no pending
// pod.
func TestGangPlanStoppedByARefusedEviction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	d, client, recorder, snap, pods, plans := gangPlanFixture(t, ctx, now, "m2")
	if !d.start(ctx, snap, &target{pods: pods[2:], gang: "default/train"}, plans) {
		t.Fatal("the plans did not start")
	}
	reservations := func() []string {
		var out []string
		for _, name := range []string{"a", "b", "c"} {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := gpu.ReservationsOf(n)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				_, suffix, _ := strings.Cut(strings.TrimPrefix(r.ID, d.prefix()), "/")
				out = append(out, name+":"+suffix+":"+string(r.Moves))
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := reservations(), []string{"c:0:m1"}; !slices.Equal(got, want) {
		t.Errorf("reservations left %v, want %v (m1's replacement's alone)", got, want)
	}
	if d.active == nil || !d.active.stopped || len(d.active.held) != 1 {
		t.Fatalf("active plan %+v; want it stopped, following m1's replacement", d.active)
	}
	close(recorder.Events)
	stopped := 0
	for ev := range recorder.Events {
		if strings.Contains(ev, "MigrationStopped") && strings.Contains(ev, "the eviction of default/m2 was refused") && strings.Contains(ev, "not planned for again before 2026-11-30T12:05:00Z") {
			stopped++
		}
	}
	if stopped != 2 {
		t.Errorf("%d MigrationStopped events, want one on each of the gang's two pods", stopped)
	}
	if len(d.moves) != 1 {
		t.Errorf("%d moves counted for the hourly limits, want 1 (m1)", len(d.moves))
	}
	// The gang is not planned for again for a while: the next plan would
	// mostly meet the same refusal.
	for _, p := range pods[2:] {
		if until, ok := d.backoff[p.UID]; !ok || !until.Equal(now.Add(d.opts.PlanTimeout)) {
			t.Errorf("%s backs off until %v (%v), want %v", p.Name, until, ok, now.Add(d.opts.PlanTimeout))
		}
	}

	// A new instance adopts what is left.
	if p := adoptedBy(t, ctx, client, now, "m1"); p == nil || len(p.held) != 1 || len(p.pending) != 0 {
		t.Errorf("adopted plan %+v; want m1's replacement's reservation alone, no pending pod", p)
	}
}

// TestGangPlanAdopted: the plans of gang g0, g1 carried out (both evictions
// taken) and the defragmenter gone before any pod arrived: a new instance
// adopts the plan with both gang pods pending and its four reservations,
// 8 GPUs made room for.
func TestGangPlanAdopted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	d, client, _, snap, pods, plans := gangPlanFixture(t, ctx, now)
	if !d.start(ctx, snap, &target{pods: pods[2:], gang: "default/train"}, plans) {
		t.Fatal("the plans did not start")
	}
	p := adoptedBy(t, ctx, client, now, "m1", "m2")
	if p == nil {
		t.Fatal("nothing adopted")
	}
	var pending []string
	for _, pod := range p.pending {
		pending = append(pending, pod.Name)
	}
	slices.Sort(pending)
	if len(p.held) != 4 || !slices.Equal(pending, []string{"g0", "g1"}) || p.milli != 8*gpu.MilliPerGPU {
		t.Errorf("adopted %d reservations for %v, %d milli-GPU; want 4, for g0 and g1, 8000", len(p.held), pending, p.milli)
	}
}
