package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestPlannerMakeRoomForAll(t *testing.T) {
	whole := gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU, MilliCPU: 1000}
	gang := func(n int, d gpu.Demand) []gpu.PendingPod {
		out := make([]gpu.PendingPod, n)
		for i := range out {
			out[i] = gpu.PendingPod{ID: fmt.Sprintf("p%d", i), Demand: d}
		}
		return out
	}
	tests := []struct {
		name     string
		gpus     []int
		pods     []gpu.PlanPod
		pending  []gpu.PendingPod
		maxMoves int
		refuses  []string // "node/pod" pairs Admits refuses
		want     string   // the plans, "; "-separated; "" when none
	}{{
		// a: GPU0 s1 (500), GPU1 idle; b: GPU0 s3 (400). p0 takes a's idle
		// GPU as it is. For p1 no GPU is idle: freeing a's GPU0 moves s1
		// (500 milli-GPU), b's moves s3 (400), one move each; b moves less.
		// s3 goes to a's GPU0, the only GPU with 400 free.
		name:    "one pod fits as it is, the other takes a move",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s3", "b", 400, 0)},
		pending: gang(2, whole), maxMoves: 1,
		want: "pending@a[1]; pending@b[0] s3->a[0]",
	}, {
		// a: s1 (500) on GPU0, s2 (500) on GPU1; b: s3 (400) on GPU0, s4
		// (400) on GPU1. p0: a's plans move 500, b's 400: s3 goes to a's
		// GPU0 (500 free, the first of the tightest). p1: s3 may not move
		// again, and a's GPU0 (s1 + s3) would take two moves; a's GPU1 (s2,
		// 500) or b's GPU1 (s4, 400): s4 goes to a's GPU1. Two moves in all.
		name:    "the moves add up across the pods",
		gpus:    []int{2, 2},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 500, 1), planPod("s3", "b", 400, 0), planPod("s4", "b", 400, 1)},
		pending: gang(2, whole), maxMoves: 2,
		want: "pending@b[0] s3->a[0]; pending@b[1] s4->a[1]",
	}, {
		// The same with one move allowed: p0 spends it, p1 finds none left.
		name:    "no room for all within the moves allowed",
		gpus:    []int{2, 2},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s2", "a", 500, 1), planPod("s3", "b", 400, 0), planPod("s4", "b", 400, 1)},
		pending: gang(2, whole), maxMoves: 1,
	}, {
		// The largest pod first: p1 (2 GPUs) can only go to a (b has one
		// GPU), moving s1 and s2 to b's GPU0 (400 + 400 of its 1000); then
		// p0 (a share of 200) fits b's GPU0 as it is (200 left).
		name:     "the largest pod is planned first",
		gpus:     []int{2, 1},
		pods:     []gpu.PlanPod{planPod("s1", "a", 400, 0), planPod("s2", "a", 400, 1)},
		pending:  []gpu.PendingPod{{ID: "p0", Demand: gpu.Demand{Count: 1, Milli: 200, MilliCPU: 1000}}, {ID: "p1", Demand: gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU, MilliCPU: 1000}}},
		maxMoves: 2,
		want:     "pending@b[0]; pending@a[0 1] s1->b[0] s2->b[0]",
	}, {
		// As the first case with a refusing p0 (its node selector): p0
		// finds no idle GPU it may take, and a plan: b's GPU0 once s3 moves
		// to a's GPU0. p1 then takes a's idle GPU1 as it is.
		name:    "each pod asks Admits for itself",
		gpus:    []int{2, 1},
		pods:    []gpu.PlanPod{planPod("s1", "a", 500, 0), planPod("s3", "b", 400, 0)},
		pending: gang(2, whole), maxMoves: 1,
		refuses: []string{"a/p0"},
		want:    "pending@b[0] s3->a[0]; pending@a[1]",
	}, {
		// a: 2 idle GPUs, which the pending pods may not use (Admits); b
		// and c: 2 GPUs, a 300 share on GPU0. p0 (2 GPUs): b and c cost a
		// move of 300 each, b first; BestFit sends s-b to c's GPU0 (700
		// free, the tightest), where p1 then finds s-b, moved already,
		// in its way. The search starts again with the moved pods kept
		// off c (where s-b landed, and p1 could have been made room on):
		// s-b goes to a's GPU0, then s-c beside it (700 free, the
		// tightest).
		name:    "a moved pod kept off the node another pending pod needs",
		gpus:    []int{2, 2, 2},
		pods:    []gpu.PlanPod{planPod("s-b", "b", 300, 0), planPod("s-c", "c", 300, 0)},
		pending: gang(2, gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU, MilliCPU: 1000}), maxMoves: 2,
		refuses: []string{"a/p0", "a/p1"},
		want:    "pending@b[0 1] s-b->a[0]; pending@c[0 1] s-c->a[0]",
	}}
	policy := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := planCluster(tc.gpus, tc.pods...)
			planner := gpu.Planner{Policy: policy, MaxMoves: tc.maxMoves}
			if tc.refuses != nil {
				planner.Admits = func(node, pod string) bool { return !slices.Contains(tc.refuses, node+"/"+pod) }
			}
			plans, ok := planner.MakeRoomForAll(nodes, tc.pending, 0)
			got := ""
			if ok {
				var each []string
				for _, p := range plans {
					each = append(each, planString(p))
				}
				got = strings.Join(each, "; ")
			}
			if got != tc.want {
				t.Errorf("plans %q, want %q", got, tc.want)
			}
			if ok {
				checkPlans(t, nodes, tc.pending, 0, plans)
			}
		})
	}
}

// TestPlannerMakeRoomForAllNeverBreaksARule plans for random gangs on random
// clusters and replays every set of plans found (checkPlans): together,
// they move no pod twice, none that may not move or of higher priority, at
// most MaxMoves in all, and leave every pending and moved pod where it fits.
func TestPlannerMakeRoomForAllNeverBreaksARule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	shares := []int64{100, 250, 300, 500, 700, gpu.MilliPerGPU}
	policies := []*gpu.Policy{gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{}), gpu.MustPolicy(gpu.PolicySpread, gpu.PolicyConfig{})}
	found, withMoves := 0, 0
	for trial := range 400 {
		gpus := make([]int, 2+rng.IntN(4))
		for i := range gpus {
			gpus[i] = []int{1, 2, 4, 8}[rng.IntN(4)]
		}
		var pods []gpu.PlanPod
		for i, count := range gpus {
			name := string(rune('a' + i))
			for g := range count {
				var used int64
				for k := range 2 {
					m := shares[rng.IntN(len(shares))]
					if used+m > gpu.MilliPerGPU || rng.IntN(4) == 0 {
						continue
					}
					used += m
					p := planPod(fmt.Sprintf("p%d-%d-%d", i, g, k), name, m, g)
					p.Demand.MilliCPU = 100 * int64(1+rng.IntN(5))
					p.Movable = rng.IntN(5) > 0
					p.Priority = int32(rng.IntN(3))
					pods = append(pods, p)
				}
			}
		}
		nodes := planCluster(gpus, pods...)
		pending := make([]gpu.PendingPod, 2+rng.IntN(2))
		for i := range pending {
			m := shares[rng.IntN(len(shares))]
			pending[i] = gpu.PendingPod{ID: fmt.Sprintf("g%d", i), Demand: gpu.Demand{Count: 1, Milli: m, MilliCPU: 1000}}
			if m == gpu.MilliPerGPU {
				pending[i].Demand.Count = 1 + rng.IntN(2)
			}
		}
		priority := int32(rng.IntN(3))
		planner := gpu.Planner{Policy: policies[trial%len(policies)], MaxMoves: 1 + rng.IntN(6)}
		plans, ok := planner.MakeRoomForAll(nodes, pending, priority)
		if !ok {
			continue
		}
		found++
		moves := 0
		for _, p := range plans {
			moves += len(p.Moves)
		}
		if moves > 0 {
			withMoves++
		}
		if moves > planner.MaxMoves {
			t.Errorf("trial %d: %d moves, at most %d allowed", trial, moves, planner.MaxMoves)
		}
		checkPlans(t, nodes, pending, priority, plans)
	}
	if withMoves < 30 {
		t.Errorf("only %d of 400 trials found plans with moves (%d in all): the property is hardly exercised", withMoves, found)
	}
}

// checkPlans replays plans, made for pending, on nodes: every moved pod
// leaves the node its plan makes room on, from where it was before any
// plan (so no pod moves twice, and no pending pod moves), may move and is
// of no higher priority; then every moved pod and every pending pod takes
// its GPUs, which must take it (checkAssignmentFits) with all the others
// in place, on nodes whose CPU and memory then suffice.
func checkPlans(t *testing.T, nodes []gpu.PlanNode, pending []gpu.PendingPod, priority int32, plans []gpu.Plan) {
	t.Helper()
	if len(plans) != len(pending) {
		t.Fatalf("%d plans for %d pods", len(plans), len(pending))
	}
	byName := map[string]*gpu.PlanNode{}
	for i := range nodes {
		n := nodes[i]
		n.Pods = slices.Clone(n.Pods)
		byName[n.GPUs.Name] = &n
	}
	moved := map[string]gpu.PlanPod{}
	for _, plan := range plans {
		for _, m := range plan.Moves {
			from := byName[m.From]
			if from == nil || byName[m.To.Node] == nil || m.From != plan.Node || m.To.Node == m.From {
				t.Fatalf("move %s from %s to %s in a plan for %s", m.Pod, m.From, m.To.Node, plan.Node)
			}
			k := slices.IndexFunc(from.Pods, func(p gpu.PlanPod) bool { return p.ID == m.Pod })
			if k < 0 {
				t.Fatalf("move %s: not a pod of %s before the plans (moved twice?)", m.Pod, m.From)
			}
			pod := from.Pods[k]
			moved[m.Pod] = pod
			from.Pods = slices.Delete(from.Pods, k, k+1)
			if !pod.Movable || pod.Priority > priority {
				t.Errorf("move %s: movable %v, priority %d for pending pods of %d", m.Pod, pod.Movable, pod.Priority, priority)
			}
			from.GPUs = from.GPUs.Without(&pod.Held)
			from.Host.FreeMilliCPU += pod.Demand.MilliCPU
			from.Host.FreeMemoryMiB += pod.Demand.HostMemoryMiB
		}
	}
	for _, plan := range plans {
		for _, m := range plan.Moves {
			d := moved[m.Pod].Demand
			checkAssignmentFits(t, byName[m.To.Node], &d, m.To, "move "+m.Pod)
		}
	}
	for i, plan := range plans {
		checkAssignmentFits(t, byName[plan.Node], &pending[i].Demand, plan.Assignment, "pending pod "+pending[i].ID)
	}
}
