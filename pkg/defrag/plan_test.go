package defrag

import (
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// TestPlansKeepEveryRule plans for a pending pod on random clusters whose
// pods break the rules in every way a tenant's pod might (no controller,
// not opted in, in a gang, under a budget of no disruption, of a higher
// priority, selecting a node pool, on a tainted or cordoned node), and
// checks each plan found: every moved pod may move (Rules.Why), is of no
// higher priority than the pending pod, and goes to a node that admits
// it; the pending pod's node admits it; and the engine's replay of the
// plan fits (no GPU past capacity).
func TestPlansKeepEveryRule(t *testing.T) {
	plans := 0
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		nodes, pods, pdbs, pending := randomCluster(rng)
		snap := gpuview.Build(nodes, append(pods, pending), gpuview.Options{})
		policy, err := snap.Policy(gpu.DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		rules := &Rules{PDBs: pdbs}
		plan, ok, _ := newCluster(snap, policy, rules, func(*v1.Pod) bool { return true }).plan(pending, 1+rng.IntN(6))
		if !ok {
			continue
		}
		plans++
		if n := snap.NodeObject(plan.Node); !admits(n, pending) {
			t.Errorf("seed %d: the pending pod is placed on %s, which does not admit it", seed, plan.Node)
		}
		views := map[string]*gpu.NodeGPUs{}
		for _, n := range snap.PlanNodes(policy, func(*v1.Pod) bool { return false }) {
			views[n.GPUs.Name] = n.GPUs
		}
		for _, mv := range plan.Moves {
			p := snap.Pod(mv.Pod)
			switch {
			case p == nil:
				t.Fatalf("seed %d: plan moves unknown pod %s", seed, mv.Pod)
			case rules.Why(p) != "":
				t.Errorf("seed %d: plan moves %s, which may not move: %s", seed, p.Name, rules.Why(p))
			case priorityOf(p) > priorityOf(pending):
				t.Errorf("seed %d: plan moves %s of priority %d for a pod of %d", seed, p.Name, priorityOf(p), priorityOf(pending))
			case !admits(snap.NodeObject(mv.To.Node), p):
				t.Errorf("seed %d: plan moves %s to %s, which does not admit it", seed, p.Name, mv.To.Node)
			}
			held, _ := gpu.AssignmentOf(p)
			views[mv.From] = views[mv.From].Without(&held)
		}
		for _, mv := range plan.Moves {
			views[mv.To.Node] = views[mv.To.Node].With(&mv.To)
		}
		views[plan.Node] = views[plan.Node].With(&plan.Assignment)
		for name, v := range views {
			for i, u := range v.Used {
				if u.Milli > gpu.MilliPerGPU {
					t.Errorf("seed %d: after the plan GPU %d of %s holds %d milli-GPU", seed, i, name, u.Milli)
				}
			}
		}
	}
	if plans < 30 {
		t.Errorf("only %d of 300 clusters had a plan: the property is hardly tried", plans)
	}
}

// randomCluster is 2 to 4 nodes of 2 to 4 GPUs, some tainted, cordoned or
// in pool "b", filled with shares and whole-GPU pods of random owners,
// opt-ins, gangs, priorities and node selectors, a PodDisruptionBudget of
// no disruption over the pods labelled "guarded", and a pending pod of 1
// or 2 GPUs.
func randomCluster(rng *rand.Rand) (nodes []*v1.Node, pods []*v1.Pod, pdbs []*policyv1.PodDisruptionBudget, pending *v1.Pod) {
	type slot struct {
		node string
		gpu  int
		free int64
	}
	var slots []slot
	for i := range 2 + rng.IntN(3) {
		name := fmt.Sprintf("n%d", i)
		w := gt.MakeGPUNode(name).GFD("A100", 2+rng.IntN(3), 81920)
		if rng.IntN(3) == 0 {
			w = w.Label("pool", "b")
		}
		n := w.Obj()
		switch rng.IntN(6) {
		case 0:
			n.Spec.Taints = []v1.Taint{{Key: "reserved", Effect: v1.TaintEffectNoSchedule}}
		case 1:
			n.Spec.Unschedulable = true
		}
		nodes = append(nodes, n)
		count := 0
		fmt.Sscan(n.Labels[gpu.LabelCount], &count)
		for g := range count {
			slots = append(slots, slot{node: name, gpu: g, free: gpu.MilliPerGPU})
		}
	}
	for k := range 4 + rng.IntN(8) {
		s := &slots[rng.IntN(len(slots))]
		milli := []int64{200, 300, 500, 600, 1000}[rng.IntN(5)]
		if s.free < milli || milli == gpu.MilliPerGPU && s.free < gpu.MilliPerGPU {
			continue
		}
		s.free -= milli
		w := gt.MakeGPUPod(fmt.Sprintf("p%d", k)).UID(fmt.Sprintf("uid-%d", k)).Node(s.node).
			Assigned(gpu.Assignment{Node: s.node, Devices: []int{s.gpu}, Milli: milli}).Priority(int32(rng.IntN(3)))
		if milli < gpu.MilliPerGPU {
			w = w.Milli(milli)
		} else {
			w = w.GPUs(1)
		}
		switch rng.IntN(8) {
		case 0: // a bare pod
		case 1:
			w = w.OwnedBy("ReplicaSet", "rs", "rs-uid") // not opted in
		case 2:
			w = w.OwnedBy("ReplicaSet", "rs", "rs-uid").Annotation(AnnotationMovable, "true").Label("scheduling.x-k8s.io/pod-group", "g")
		case 3:
			w = w.OwnedBy("ReplicaSet", "rs", "rs-uid").Annotation(AnnotationMovable, "true").Label("guarded", "yes")
		default:
			w = w.OwnedBy("ReplicaSet", "rs", fmt.Sprint("rs-", k%3)).Annotation(AnnotationMovable, "true")
		}
		p := w.Obj()
		if rng.IntN(5) == 0 {
			p.Spec.NodeSelector = map[string]string{"pool": "b"}
		}
		pods = append(pods, p)
	}
	pdbs = []*policyv1.PodDisruptionBudget{{
		ObjectMeta: metav1.ObjectMeta{Name: "guard", Namespace: "default", Generation: 1},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"guarded": "yes"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1},
	}}
	pending = gt.MakeGPUPod("pending").UID("pending").GPUs(1 + rng.IntN(2)).Priority(int32(rng.IntN(3))).Obj()
	if rng.IntN(4) == 0 {
		pending.Spec.NodeSelector = map[string]string{"pool": "b"}
	}
	return nodes, pods, pdbs, pending
}

// TestOverLimits: a plan of several moves, or a gang's plans, are held to
// the hourly limits of each node they empty and of the namespaces they move
// pods from, counting the moves of the last hour.
func TestOverLimits(t *testing.T) {
	pods := []*v1.Pod{
		gt.MakeGPUPod("x").UID("x").Namespace("team").Node("a").Obj(),
		gt.MakeGPUPod("y").UID("y").Namespace("team").Node("a").Obj(),
		gt.MakeGPUPod("z").UID("z").Namespace("team").Node("b").Obj(),
	}
	nodes := []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 2, 81920).Obj(), gt.MakeGPUNode("b").GFD("A100", 2, 81920).Obj()}
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	offA := gpu.Plan{Node: "a", Moves: []gpu.Move{{Pod: "x", From: "a"}, {Pod: "y", From: "a"}}}
	offB := gpu.Plan{Node: "b", Moves: []gpu.Move{{Pod: "z", From: "b"}}}
	asIs := gpu.Plan{Node: "b"} // a gang's pod that fits as it is
	cases := []struct {
		name    string
		plans   []gpu.Plan
		history []move
		node    int
		ns      int
		want    string
	}{
		// 2 moves off a, of team: within 2 per node and 3 per namespace.
		{"within both", []gpu.Plan{offA}, nil, 2, 3, ""},
		// 1 earlier move off a + 2 = 3 > 2.
		{"the node's limit", []gpu.Plan{offA}, []move{{node: "a", namespace: "other"}}, 2, 3, "move 3 pods off node a within the hour, beyond --moves-per-node-per-hour 2"},
		// 2 earlier moves of team (off b) + 2 = 4 > 3.
		{"the namespace's limit", []gpu.Plan{offA}, []move{{node: "b", namespace: "team"}, {node: "b", namespace: "team"}}, 2, 3,
			"move 4 pods of namespace team within the hour, beyond --moves-per-namespace-per-hour 3"},
		// A plan alone can pass a node's limit: 2 > 1.
		{"one plan", []gpu.Plan{offA}, nil, 1, 3, "move 2 pods off node a within the hour, beyond --moves-per-node-per-hour 1"},
		// A gang's plans: 2 off a and 1 off b are within 2 per node each,
		// and a plan without moves counts nothing; of team, 3 ≤ 3.
		{"a gang within both", []gpu.Plan{offA, offB, asIs}, nil, 2, 3, ""},
		// 1 earlier move off b + 1 = 2 > 1, though a's 2 are within... a
		// is checked first: 2 > 1 there already.
		{"a gang past a node's limit", []gpu.Plan{offB, offA}, []move{{node: "b", namespace: "other"}}, 1, 5, "move 2 pods off node b within the hour, beyond --moves-per-node-per-hour 1"},
		// The namespace counts across the plans: 2 + 1 = 3 > 2.
		{"a gang past a namespace's limit", []gpu.Plan{offA, offB}, nil, 2, 2, "move 3 pods of namespace team within the hour, beyond --moves-per-namespace-per-hour 2"},
	}
	for _, c := range cases {
		d := &Defragmenter{opts: Options{MovesPerNodePerHour: c.node, MovesPerNamespacePerHour: c.ns}, moves: c.history}
		if got := d.overLimits(snap, c.plans); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
