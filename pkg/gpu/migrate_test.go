package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// planPod is a movable pod of priority 0 holding milli on each of devices of
// node, asking 1 CPU.
func planPod(id, node string, milli int64, devices ...int) gpu.PlanPod {
	d := gpu.Demand{Count: len(devices), Milli: milli, MilliCPU: 1000}
	if milli < gpu.MilliPerGPU {
		d.Count = 1
	}
	return gpu.PlanPod{ID: id, Demand: d, Held: gpu.Assignment{Node: node, Devices: devices, Milli: milli}, Movable: true}
}

// planCluster builds A100 nodes of the given GPU counts, named a, b, c...,
// each with 8 CPUs, holding pods (each pod on the node its Held names).
func planCluster(gpus []int, pods ...gpu.PlanPod) []gpu.PlanNode {
	nodes := make([]gpu.PlanNode, len(gpus))
	for i, count := range gpus {
		name := string(rune('a' + i))
		view := gpu.EmptyNodeGPUs(gputest.MakeGPUNode(name).GFD(victimModel, count, 81920).Obj())
		nodes[i] = gpu.PlanNode{GPUs: view, Host: gpu.Host{Known: true, FreeMilliCPU: 8000, FreeMemoryMiB: 1 << 20}}
	}
	for _, p := range pods {
		for i := range nodes {
			if nodes[i].GPUs.Name == p.Held.Node {
				if len(p.Held.Devices) > 0 {
					nodes[i].GPUs = nodes[i].GPUs.With(&p.Held)
				}
				nodes[i].Host.FreeMilliCPU -= p.Demand.MilliCPU
				nodes[i].Pods = append(nodes[i].Pods, p)
			}
		}
	}
	return nodes
}

// planString is a plan as "pending@node[devices] pod->node[devices] ...".
func planString(p gpu.Plan) string {
	s := fmt.Sprintf("pending@%s%v", p.Node, p.Assignment.Devices)
	for _, m := range p.Moves {
		s += fmt.Sprintf(" %s->%s%v", m.Pod, m.To.Node, m.To.Devices)
	}
	return s
}

func TestPlannerMakeRoom(t *testing.T) {
	whole := &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU, MilliCPU: 1000}
	two := &gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU, MilliCPU: 1000}
	unmovable := func(p gpu.PlanPod) gpu.PlanPod { p.Movable = false; return p }
	priority := func(p gpu.PlanPod, prio int32) gpu.PlanPod { p.Priority = prio; return p }
	tests := []struct {
		name     string
		gpus     []int
		pods     []gpu.PlanPod
		pending  *gpu.Demand
		priority int32
		maxMoves int
		cpu      map[string]int64 // free CPU overrides, by node
		refuses  []string         // "node/pod" pairs Admits refuses ("node/" for the pending pod)
		want     string           // "" when no plan
	}{{
		// a: GPU0 s1 (500), GPU1 s2 (300); b: GPU0 s3 (400). Freeing a GPU of
		// a moves one pod (s1, the first GPU's), of b one pod (s3): one move
		// each; b moves 400 milli-GPU against a's 500, so b is made room on.
		// s3 goes where BestFit packs it tightest: a's GPU0 (500 free → 100
		// left) before GPU1 (700 → 300).
		name:    "one move, the least GPU moved",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), planPod("s3", "b", 400, 0)},
		pending: whole, maxMoves: 1,
		want: "pending@b[0] s3->a[0]",
	}, {
		// As above with s3 of priority 5 against a pending pod of 0: b has
		// nothing to move, so a is made room on by moving s1 (GPU0, the
		// first of a's one-move sets) to b's GPU0 (600 free).
		name:    "never a pod of higher priority for one of lower",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), priority(planPod("s3", "b", 400, 0), 5)},
		pending: whole, maxMoves: 1,
		want: "pending@a[0] s1->b[0]",
	}, {
		// The same pending pod at priority 5 may move s3 again.
		name:    "a pod of equal priority may move",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), priority(planPod("s3", "b", 400, 0), 5)},
		pending: whole, priority: 5, maxMoves: 1,
		want: "pending@b[0] s3->a[0]",
	}, {
		// a: GPU0 p (500, priority 1), GPU1 q and r (300 each, priority 0);
		// b: an unmovable 200. For a pending pod of priority 1, freeing GPU0
		// moves one pod, GPU1 two: a move costs a pod whatever its priority,
		// so p moves, to b (800 free).
		name: "fewest moves, whatever the moved pods' priorities",
		gpus: []int{2, 1},
		pods: []gpu.PlanPod{priority(planPod("p", "a", 500, 0), 1), planPod("q", "a", 300, 1), planPod("r", "a", 300, 1),
			unmovable(planPod("u", "b", 200, 0))},
		pending: whole, priority: 1, maxMoves: 1,
		want: "pending@a[0] p->b[0]",
	}, {
		name:    "pods that may not move stay",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{unmovable(planPod("s1", "a", 500, 0)), unmovable(planPod("s2", "a", 300, 1)), unmovable(planPod("s3", "b", 400, 0))},
		pending: whole, maxMoves: 4,
	}, {
		// a: GPU0 s1+s2 (300 each), GPU1 s3+s4 (300 each); b: GPU0 s5 (600).
		// Freeing a GPU of a moves two pods; freeing b's moves one, s5, which
		// fits no other node (a has 400 free on each GPU). No plan of one
		// move exists.
		name:    "a plan needs more moves than allowed",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 300, 0), planPod("s2", "a", 300, 0), planPod("s3", "a", 300, 1), planPod("s4", "a", 300, 1), planPod("s5", "b", 600, 0)},
		pending: whole, maxMoves: 1,
	}, {
		// As above with c (1 GPU) holding s6 (100). One-move plans: b (s5,
		// 600 milli-GPU moved), c (s6, 100): c is made room on. s6 goes where
		// BestFit packs it tightest: the fuller node, b (400 free in all)
		// before a (800).
		name:    "the least GPU moved decides among one-move plans",
		gpus:    []int{2, 1, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 300, 0), planPod("s2", "a", 300, 0), planPod("s3", "a", 300, 1), planPod("s4", "a", 300, 1), planPod("s5", "b", 600, 0), planPod("s6", "c", 100, 0)},
		pending: whole, maxMoves: 2,
		want: "pending@c[0] s6->b[0]",
	}, {
		// Two GPUs wanted: a (2 GPUs) holds s1 on GPU0 and s2 on GPU1; b (1
		// GPU) is too small. Both of a's pods move (2 moves) to b's GPU0,
		// the only other GPU: s1 then s2 (equal sizes keep a's order), 800
		// milli-GPU in all.
		name:    "whole GPUs: every holder of the GPUs taken",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 400, 0), planPod("s2", "a", 400, 1)},
		pending: two, maxMoves: 2,
		want: "pending@a[0 1] s1->b[0] s2->b[0]",
	}, {
		// As the first case with a overcommitted (-1000m CPU free) and b
		// full (0). a once s1 leaves has 0m free, short of the pending pod's
		// 1000m: not a candidate. b once s3 leaves has 1000m: the pending pod
		// fits, but s3 (1000m) fits no other node (a has none). No plan.
		name:    "CPU counted on both ends",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), planPod("s3", "b", 400, 0)},
		pending: whole, maxMoves: 1,
		cpu: map[string]int64{"a": -1000, "b": 0},
	}, {
		// a: an idle GPU, and a pod without GPUs holding 6 of its 8 CPUs; b:
		// s1 (800, 1 CPU). The pending pod asks 1 GPU and 4 CPUs. a's GPU
		// fits already, its CPU (2000m) does not: moving cpu6 frees 6000m,
		// one move of no GPU. b: moving s1 frees its GPU, one move of 800
		// milli-GPU. a wins on GPU moved; cpu6 fits b (7000m free).
		name:    "a pod without GPUs moves to free CPU",
		gpus:    []int{1, 1},
		pods:    []gpu.PlanPod{{ID: "cpu6", Demand: gpu.Demand{MilliCPU: 6000}, Held: gpu.Assignment{Node: "a"}, Movable: true}, planPod("s1", "b", 800, 0)},
		pending: &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU, MilliCPU: 4000}, maxMoves: 1,
		want: "pending@a[0] cpu6->b[]",
	}, {
		// The first case with b refusing the pending pod (its selector):
		// a is made room on instead, moving s1 (GPU0) to b's GPU0.
		name:    "a node that does not admit the pending pod",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), planPod("s3", "b", 400, 0)},
		pending: whole, maxMoves: 1,
		refuses: []string{"b/"},
		want:    "pending@a[0] s1->b[0]",
	}, {
		// The first case with a refusing s3 (a taint s3 does not
		// tolerate): s3 has nowhere to go, and a's plan moves s1 to b.
		name:    "a node that does not admit a moved pod",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 300, 1), planPod("s3", "b", 400, 0)},
		pending: whole, maxMoves: 1,
		refuses: []string{"a/s3"},
		want:    "pending@a[0] s1->b[0]",
	}}
	policy := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := planCluster(tc.gpus, tc.pods...)
			for i := range nodes {
				if c, ok := tc.cpu[nodes[i].GPUs.Name]; ok {
					nodes[i].Host.FreeMilliCPU = c
				}
			}
			planner := gpu.Planner{Policy: policy, MaxMoves: tc.maxMoves}
			if tc.refuses != nil {
				planner.Admits = func(node, pod string) bool { return !slices.Contains(tc.refuses, node+"/"+pod) }
			}
			plan, ok := planner.MakeRoom(nodes, tc.pending, tc.priority)
			got := ""
			if ok {
				got = planString(plan)
			}
			if got != tc.want {
				t.Errorf("plan %q, want %q", got, tc.want)
			}
			if ok {
				checkPlan(t, nodes, tc.pending, tc.priority, plan)
			}
		})
	}
}

// checkPlan replays plan, made for pending, on nodes (checkPlans).
func checkPlan(t *testing.T, nodes []gpu.PlanNode, pending *gpu.Demand, priority int32, plan gpu.Plan) {
	t.Helper()
	checkPlans(t, nodes, []gpu.PendingPod{{ID: "pending", Demand: *pending}}, priority, []gpu.Plan{plan})
}

// checkAssignmentFits adds a to n, failing the test when a's GPUs cannot take
// d (model, size, capacity) or n's CPU or memory run out.
func checkAssignmentFits(t *testing.T, n *gpu.PlanNode, d *gpu.Demand, a gpu.Assignment, what string) {
	t.Helper()
	if len(a.Devices) != d.Count {
		t.Errorf("%s: %d GPUs assigned, %d asked", what, len(a.Devices), d.Count)
	}
	for _, index := range a.Devices {
		g := slices.IndexFunc(n.GPUs.Inventory.Devices, func(dev gpu.Device) bool { return dev.Index == index })
		if g < 0 || gpu.DeviceReason(n.GPUs, d, g) != 0 {
			t.Errorf("%s: GPU %d of %s cannot take %+v (used %+v)", what, index, n.GPUs.Name, *d, n.GPUs.Used)
		}
	}
	n.GPUs = n.GPUs.With(&a)
	n.Host.FreeMilliCPU -= d.MilliCPU
	n.Host.FreeMemoryMiB -= d.HostMemoryMiB
	if n.Host.Known && (n.Host.FreeMilliCPU < 0 || n.Host.FreeMemoryMiB < 0) {
		t.Errorf("%s: %s overcommitted: %dm CPU, %d MiB free", what, n.GPUs.Name, n.Host.FreeMilliCPU, n.Host.FreeMemoryMiB)
	}
}

// TestPlannerNeverBreaksARule plans for random pending pods on random
// clusters and replays every plan found (checkPlan): no plan moves a pod
// that may not move, one of higher priority, or onto a GPU or a node
// without room for it, and the pending pod always fits where planned.
func TestPlannerNeverBreaksARule(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	shares := []int64{100, 250, 300, 500, 700, gpu.MilliPerGPU}
	policies := []*gpu.Policy{gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{}), gpu.MustPolicy(gpu.PolicySpread, gpu.PolicyConfig{})}
	plans := 0
	for trial := range 400 {
		gpus := make([]int, 2+rng.IntN(4))
		for i := range gpus {
			gpus[i] = []int{1, 2, 4, 8}[rng.IntN(4)]
		}
		var pods []gpu.PlanPod
		used := make([][]int64, len(gpus))
		for i, count := range gpus {
			used[i] = make([]int64, count)
			name := string(rune('a' + i))
			for g := range count {
				for k := 0; k < 3; k++ {
					m := shares[rng.IntN(len(shares))]
					if used[i][g]+m > gpu.MilliPerGPU {
						continue
					}
					used[i][g] += m
					p := planPod(fmt.Sprintf("p%d-%d-%d", i, g, k), name, m, g)
					p.Demand.MilliCPU = 100 * int64(1+rng.IntN(5))
					p.Movable = rng.IntN(5) > 0
					p.Priority = int32(rng.IntN(3))
					pods = append(pods, p)
				}
			}
			if rng.IntN(2) == 0 { // a pod without GPUs taking much of the CPU
				pods = append(pods, gpu.PlanPod{ID: fmt.Sprintf("cpu%d", i), Demand: gpu.Demand{MilliCPU: 1000 * int64(1+rng.IntN(4))},
					Held: gpu.Assignment{Node: name}, Movable: rng.IntN(5) > 0})
			}
		}
		nodes := planCluster(gpus, pods...)
		m := shares[rng.IntN(len(shares))]
		pending := &gpu.Demand{Count: 1, Milli: m, MilliCPU: 1000 * int64(1+rng.IntN(4))}
		if m == gpu.MilliPerGPU {
			pending.Count = 1 + rng.IntN(2)
		}
		priority := int32(rng.IntN(3))
		planner := gpu.Planner{Policy: policies[trial%len(policies)], MaxMoves: 1 + rng.IntN(4)}
		plan, ok := planner.MakeRoom(nodes, pending, priority)
		if !ok {
			continue
		}
		plans++
		if len(plan.Moves) > planner.MaxMoves {
			t.Errorf("trial %d: %d moves, at most %d allowed", trial, len(plan.Moves), planner.MaxMoves)
		}
		checkPlan(t, nodes, pending, priority, plan)
	}
	if plans < 50 {
		t.Errorf("only %d of 400 trials found a plan: the property is hardly exercised", plans)
	}
}

// BenchmarkPlannerMakeRoom is the planner's time for one plan on a full
// cluster of 8-GPU nodes with the shapes of the openb default list's shares
// (benchPlanCluster), for a 1-GPU pod of 4 CPUs that fits nowhere.
func BenchmarkPlannerMakeRoom(b *testing.B) {
	for _, count := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", count), func(b *testing.B) {
			nodes, policy := benchPlanCluster(count)
			planner := gpu.Planner{Policy: policy, MaxMoves: 4}
			pending := &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU, MilliCPU: 4000}
			if _, ok := planner.MakeRoom(nodes, pending, 0); !ok {
				b.Fatal("no plan: the benchmark measures a plan found")
			}
			b.ReportAllocs()
			for b.Loop() {
				planner.MakeRoom(nodes, pending, 0)
			}
		})
	}
}

// BenchmarkPlannerMakeRoomForAll is the planner's time for the plans of a
// gang of four 2-GPU pods of 4 CPUs on the cluster of
// BenchmarkPlannerMakeRoom, 32 moves allowed.
func BenchmarkPlannerMakeRoomForAll(b *testing.B) {
	for _, count := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", count), func(b *testing.B) {
			nodes, policy := benchPlanCluster(count)
			planner := gpu.Planner{Policy: policy, MaxMoves: 32}
			gang := make([]gpu.PendingPod, 4)
			for i := range gang {
				gang[i] = gpu.PendingPod{ID: fmt.Sprint("g", i), Demand: gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU, MilliCPU: 4000}}
			}
			if _, ok := planner.MakeRoomForAll(nodes, gang, 0); !ok {
				b.Fatal("no plans: the benchmark measures plans found")
			}
			b.ReportAllocs()
			for b.Loop() {
				planner.MakeRoomForAll(nodes, gang, 0)
			}
		})
	}
}

// benchPlanCluster is count full 8-GPU nodes, each GPU holding up to three
// of the openb default list's shares (810, 650, 470, 320 milli-GPU, drawn
// with a fixed seed, 1 CPU each, every node's CPU 80% taken), and PairFit
// with the four shares (weight 1 each) and a 1-GPU pod of 4 CPUs (weight 2)
// as typical pods.
func benchPlanCluster(count int) ([]gpu.PlanNode, *gpu.Policy) {
	rng := rand.New(rand.NewPCG(1, 2))
	shares := []int64{810, 650, 470, 320}
	var typical []gpu.TypicalPod
	for _, m := range shares {
		typical = append(typical, gpu.TypicalPod{Demand: gpu.Demand{Count: 1, Milli: m, MilliCPU: 1000}, Weight: 1})
	}
	typical = append(typical, gpu.TypicalPod{Demand: gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU, MilliCPU: 4000}, Weight: 2})
	policy := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: gpu.NewShapeWindow(0, typical)})
	nodes := make([]gpu.PlanNode, count)
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		view := gpu.EmptyNodeGPUs(gputest.MakeGPUNode(name).GFD(victimModel, 8, 81920).Obj())
		n := gpu.PlanNode{Host: gpu.Host{Known: true, FreeMilliCPU: 64000 * 2 / 10, FreeMemoryMiB: 1 << 20}}
		for g := range 8 {
			var used int64
			for k := range 3 {
				m := shares[rng.IntN(len(shares))]
				if used+m > gpu.MilliPerGPU {
					continue
				}
				used += m
				p := planPod(fmt.Sprintf("%s-%d-%d", name, g, k), name, m, g)
				view = view.With(&p.Held)
				n.Pods = append(n.Pods, p)
			}
		}
		n.GPUs = view
		nodes[i] = n
	}
	return nodes, policy
}
