package defrag

import (
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// BenchmarkDefragmenterPlan is what one plan costs the defragmenter on a
// full cluster of 8-GPU nodes holding shares of 810, 650, 470 and 320
// milli-GPU (the openb default list's, drawn with a fixed seed, each owned
// by a ReplicaSet and opted in, 1 CPU each), for a pending 1-GPU pod that
// fits nowhere, under PairFit: the snapshot of the cluster (gpuview.Build,
// every round), then the plan (cluster.plan: the planner with the movable rules
// and each destination's admission checked).
func BenchmarkDefragmenterPlan(b *testing.B) {
	for _, count := range []int{1213, 5000} {
		nodes, pods := fullCluster(count)
		pending := gt.MakeGPUPod("pending").UID("pending").GPUs(1).CPU("4").Obj()
		pods = append(pods, pending)
		b.Run(fmt.Sprintf("snapshot/nodes=%d", count), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				gpuview.Build(nodes, pods, gpuview.Options{})
			}
		})
		b.Run(fmt.Sprintf("plan/nodes=%d", count), func(b *testing.B) {
			snap := gpuview.Build(nodes, pods, gpuview.Options{})
			policy, err := snap.Policy(gpu.PolicyPairFit)
			if err != nil {
				b.Fatal(err)
			}
			rules := &Rules{}
			if _, ok, why := newCluster(snap, policy, rules, func(*v1.Pod) bool { return true }).plan(pending, 10); !ok {
				b.Fatalf("no plan: %+v", why)
			}
			b.ReportAllocs()
			for b.Loop() {
				newCluster(snap, policy, rules, func(*v1.Pod) bool { return true }).plan(pending, 10)
			}
		})
	}
}

// fullCluster is count nodes of 8 A100s and 64 CPUs whose GPUs hold up to
// three shares each, as many as fit.
func fullCluster(count int) ([]*v1.Node, []*v1.Pod) {
	rng := rand.New(rand.NewPCG(1, 2))
	shares := []int64{810, 650, 470, 320}
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range count {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, gt.MakeGPUNode(name).GFD("A100", 8, 81920).Obj())
		for g := range 8 {
			var used int64
			for k := range 3 {
				m := shares[rng.IntN(len(shares))]
				if used+m > gpu.MilliPerGPU {
					continue
				}
				used += m
				id := fmt.Sprintf("%s-%d-%d", name, g, k)
				pods = append(pods, gt.MakeGPUPod(id).UID(id).Milli(m).CPU("1").Node(name).
					Assigned(gpu.Assignment{Node: name, Devices: []int{g}, Milli: m}).
					OwnedBy("ReplicaSet", "rs", "rs-uid").Annotation(AnnotationMovable, "true").Obj())
			}
		}
	}
	return nodes, pods
}
