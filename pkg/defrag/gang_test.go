package defrag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// TestPlanGang plans for gang "train" (2-GPU pods) on a (2 A100s, idle),
// b and c (2 T4s each, a movable 300 milli-GPU share on GPU0):
//
//   - any model: one pod takes a as it is, the other b or c once its share
//     moves (1 move; a holds the first pod, so the share goes to the
//     other T4 node);
//   - one model (the default): a holds one pod only, so the gang goes on
//     the T4s, both made room on (2 moves);
//   - a PodGroup of minMember 2 with 3 pods pending: plans for 2 only;
//   - a gang whose PodGroup is not known: no plan, and says why.
func TestPlanGang(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("a").GFD("A100", 2, 81920).Obj(),
		gt.MakeGPUNode("b").GFD("T4", 2, 16384).Obj(),
		gt.MakeGPUNode("c").GFD("T4", 2, 16384).Obj(),
	}
	share := func(name, node string) *v1.Pod {
		return gt.MakeGPUPod(name).UID(name).Node(node).Milli(300).Assigned(gpu.Assignment{Node: node, Devices: []int{0}, Milli: 300}).
			OwnedBy("ReplicaSet", "infer", "rs-uid").Annotation(AnnotationMovable, "true").Obj()
	}
	member := func(i int) *v1.Pod {
		return gt.MakeGPUPod(fmt.Sprintf("train-%d", i)).UID(fmt.Sprintf("train-%d", i)).GPUs(2).Label(podgroup.LabelPodGroup, "train").Obj()
	}
	pods := []*v1.Pod{share("s-b", "b"), share("s-c", "c"), member(0), member(1), member(2)}
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	policy, err := snap.Policy(gpu.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	plan := func(spec gpuview.GangSpec) ([]*v1.Pod, []gpu.Plan, bool, *noPlan) {
		specs := map[string]gpuview.GangSpec{"default/train": spec}
		g, ok := snap.GangOf(pods[2], specs)
		if !ok {
			t.Fatal("train-0 is in no gang")
		}
		c := newCluster(snap, policy, &Rules{}, func(*v1.Pod) bool { return true })
		a, why, asks := c.askOf(&g, specs)
		if !asks {
			t.Fatalf("the gang asks for nothing: %q", why)
		}
		plans, ok, noPlan := c.planGang(&g, &a, 10)
		return a.pods, plans, ok, noPlan
	}
	nodesOf := func(plans []gpu.Plan) []string {
		var out []string
		for _, p := range plans {
			out = append(out, p.Node)
		}
		slices.Sort(out)
		return out
	}

	members, plans, ok, why := plan(gpuview.GangSpec{MinMember: 2, MixedModels: true})
	if !ok {
		t.Fatalf("any model: no plan: %v", why)
	}
	if got := nodesOf(plans); len(members) != 2 || movesOf(plans) != 1 || got[0] != "a" || got[1] == "a" {
		t.Errorf("any model: %d pods on %v with %d moves; want 2, a and a T4 node, 1 move", len(members), got, movesOf(plans))
	}

	members, plans, ok, why = plan(gpuview.GangSpec{MinMember: 2})
	if !ok {
		t.Fatalf("one model: no plan: %v", why)
	}
	if got := nodesOf(plans); len(members) != 2 || movesOf(plans) != 2 || !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("one model: %d pods on %v with %d moves; want 2, on b and c, 2 moves", len(members), got, movesOf(plans))
	}
	for _, p := range plans {
		for _, mv := range p.Moves {
			if mv.To.Node != "a" {
				t.Errorf("one model: %s moves to %s; the only room left is a's", mv.Pod, mv.To.Node)
			}
		}
	}

	if members, _, _, _ = plan(gpuview.GangSpec{MinMember: 3}); len(members) != 3 {
		t.Errorf("minMember 3: planned for %d pods, want 3", len(members))
	}

	g, _ := snap.GangOf(pods[2], nil)
	c := newCluster(snap, policy, &Rules{}, func(*v1.Pod) bool { return true })
	if _, why, asks := c.askOf(&g, nil); asks || !strings.Contains(why, "its PodGroup was not read") {
		t.Errorf("a gang without its PodGroup: asks %v, %q; want no plan, saying the PodGroup was not read", asks, why)
	}
	text, err := Explain(snap, pods[2], map[string]gpuview.GangSpec{"default/train": {MinMember: 2}}, Rules{}, gpu.DefaultPolicy, time.Now())
	if err != nil || !strings.Contains(text, "moving 2 pod(s) makes room for gang default/train, the 2 pods it needs at once") {
		t.Errorf("explain: %q (%v)", text, err)
	}
}

// TestPreempting: a pod nominated to a node is one preemption makes room
// for only while pods are being deleted there; a nomination alone (the
// scheduler's expectation for a gang's pod at Permit, kept after the gang
// is released) makes no room, and the gang is planned for.
func TestPreempting(t *testing.T) {
	nominated := gt.MakeGPUPod("train-0").GPUs(4).Obj()
	nominated.Status.NominatedNodeName = "c"
	running := gt.MakeGPUPod("victim").Node("c").GPUs(1).Obj()
	leaving := running.DeepCopy()
	now := metav1.Now()
	leaving.DeletionTimestamp = &now
	elsewhere := leaving.DeepCopy()
	elsewhere.Spec.NodeName = "b"
	for _, c := range []struct {
		name string
		pod  *v1.Pod
		pods []*v1.Pod
		want bool
	}{
		{"not nominated", gt.MakeGPUPod("p").GPUs(4).Obj(), []*v1.Pod{leaving}, false},
		{"nominated, nothing leaving", nominated, []*v1.Pod{running}, false},
		{"nominated, a pod leaving there", nominated, []*v1.Pod{running, leaving}, true},
		{"nominated, a pod leaving elsewhere", nominated, []*v1.Pod{elsewhere}, false},
	} {
		if got := preempting(c.pod, c.pods); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestNoMovesForAPodThatFits: a pending pod that fits as the cluster is
// (the scheduler has not tried it since room was made, by preemption or a
// pod that left) gets a plan without moves, which the defragmenter does not
// act on, and explain shows none.
func TestNoMovesForAPodThatFits(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 2, 81920).Obj()}
	pending := gt.MakeGPUPod("p").UID("p").GPUs(1).Obj()
	snap := gpuview.Build(nodes, []*v1.Pod{pending}, gpuview.Options{})
	policy, err := snap.Policy(gpu.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	plan, ok, _ := newCluster(snap, policy, &Rules{}, func(*v1.Pod) bool { return true }).plan(pending, 4)
	if !ok || len(plan.Moves) != 0 || plan.Node != "a" {
		t.Errorf("plan %+v (found %v), want a on node a without moves", plan, ok)
	}
	d := &Defragmenter{opts: Options{Mode: DryRun}}
	if d.act(context.Background(), snap, &target{pods: []*v1.Pod{pending}}, []gpu.Plan{plan}, ok, nil) {
		t.Error("the defragmenter acted on a plan without moves")
	}
	if text, err := Explain(snap, pending, nil, Rules{}, gpu.DefaultPolicy, time.Now()); err != nil || text != "" {
		t.Errorf("explain: %q (%v), want nothing", text, err)
	}
}

// TestAskOf: which of a gang's pods a plan must place. Gang "g" of
// PodGroup default/g; workers ask for 1 GPU each, for scheduler gpusched.
func TestAskOf(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 8, 81920).Obj()}
	worker := func(name string) *gt.PodWrapper {
		return gt.MakeGPUPod(name).UID(name).GPUs(1).SchedulerName("gpusched").Label(podgroup.LabelPodGroup, "g")
	}
	launcher := gt.MakeGPUPod("launcher").UID("launcher").SchedulerName("gpusched").Label(podgroup.LabelPodGroup, "g").Obj()
	claimPod := worker("claims").Obj()
	claimPod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptrTo("gpu")}}
	workload := gt.MakeGPUPod("w").UID("w").GPUs(1).SchedulerName("gpusched").Obj()
	workload.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptrTo("train")}
	cases := []struct {
		name      string
		pods      []*v1.Pod
		minMember int
		want      string // the pods asked for, comma-separated; "-" when none
		why       string // part of why, when none
	}{
		// minMember 3: the launcher (no GPU) counts first, then 2 workers
		// in queue order (by age, then name: w0, w1).
		{"a pod without GPUs counts first", []*v1.Pod{launcher, worker("w0").Obj(), worker("w1").Obj(), worker("w2").Obj(), worker("w3").Obj()}, 3, "w0,w1", ""},
		// minMember 3 less 1 bound: 2 of the 3 pending.
		{"bound pods count", []*v1.Pod{worker("w0").Node("a").Obj(), worker("w1").Obj(), worker("w2").Obj(), worker("w3").Obj()}, 3, "w1,w2", ""},
		{"too few pods pending", []*v1.Pod{worker("w0").Obj(), worker("w1").Obj()}, 4, "-", ""},
		{"a pod for another scheduler", []*v1.Pod{worker("w0").Obj(), worker("w1").SchedulerName("other").Obj()}, 2, "-", ""},
		{"a pod asking for GPUs by claims", []*v1.Pod{worker("w0").Obj(), claimPod}, 2, "-", ""},
		{"a gang of the Workload API", []*v1.Pod{workload}, 1, "-", "gangs of the Workload API are not planned for"},
	}
	for _, tc := range cases {
		snap := gpuview.Build(nodes, tc.pods, gpuview.Options{SchedulerNames: []string{"gpusched"}})
		policy, err := snap.Policy(gpu.DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		var pending *v1.Pod
		for _, p := range tc.pods {
			if p.Spec.NodeName == "" {
				pending = p
				break
			}
		}
		specs := map[string]gpuview.GangSpec{"default/g": {MinMember: tc.minMember}}
		g, _ := snap.GangOf(pending, specs)
		a, why, ok := newCluster(snap, policy, &Rules{}, func(*v1.Pod) bool { return true }).askOf(&g, specs)
		got := "-"
		if ok {
			var names []string
			for _, p := range a.pods {
				names = append(names, p.Name)
			}
			got = strings.Join(names, ",")
		}
		if got != tc.want || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
			t.Errorf("%s: asks %s (why %q), want %s (why %q)", tc.name, got, why, tc.want, tc.why)
		}
	}
}

func ptrTo(s string) *string { return &s }

// TestPlanGangWithoutModels: nodes that name no GPU model (only
// nvidia.com/gpu allocatable) leave the one-model rule nothing to hold a
// gang to: a and b (2 GPUs, a movable 300 share on GPU 0 each) are made
// room on for two 2-GPU pods, the shares going to c (1 idle GPU).
func TestPlanGangWithoutModels(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("a").AllocatableGPUs(2).Obj(), gt.MakeGPUNode("b").AllocatableGPUs(2).Obj(), gt.MakeGPUNode("c").AllocatableGPUs(1).Obj()}
	share := func(name, node string) *v1.Pod {
		return gt.MakeGPUPod(name).UID(name).Node(node).Milli(300).Assigned(gpu.Assignment{Node: node, Devices: []int{0}, Milli: 300}).
			OwnedBy("ReplicaSet", "infer", "rs-uid").Annotation(AnnotationMovable, "true").Obj()
	}
	member := func(i int) *v1.Pod {
		return gt.MakeGPUPod(fmt.Sprintf("train-%d", i)).UID(fmt.Sprintf("train-%d", i)).GPUs(2).Label(podgroup.LabelPodGroup, "train").Obj()
	}
	pods := []*v1.Pod{share("s-a", "a"), share("s-b", "b"), member(0), member(1)}
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	policy, err := snap.Policy(gpu.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]gpuview.GangSpec{"default/train": {MinMember: 2}}
	g, _ := snap.GangOf(pods[2], specs)
	c := newCluster(snap, policy, &Rules{}, func(*v1.Pod) bool { return true })
	a, why, asks := c.askOf(&g, specs)
	if !asks {
		t.Fatalf("the gang asks for nothing: %q", why)
	}
	plans, ok, noPlan := c.planGang(&g, &a, 10)
	if !ok || movesOf(plans) != 2 {
		t.Fatalf("plans %v (found %v, %v); want a and b made room on, 2 moves", plans, ok, noPlan)
	}
}
