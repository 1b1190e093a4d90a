package gpu_test

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// busyNode is an 8-GPU node with GPUs 0-2 whole, 3 and 4 shared, 5-7 free.
func busyNode(b *testing.B, name string) (*v1.Node, []*v1.Pod) {
	node := gt.MakeGPUNode(name).GFD("A100", 8, 81920).Clique("c").Obj()
	pods := []*v1.Pod{
		gt.MakeGPUPod(name + "-w").Node(name).Assigned(gpu.Assignment{Node: name, Devices: []int{0, 1, 2}, Milli: 1000}).Obj(),
	}
	for i, m := range []int64{300, 450, 200, 700} {
		pods = append(pods, gt.MakeGPUPod(fmt.Sprintf("%s-s%d", name, i)).Node(name).
			Assigned(gpu.Assignment{Node: name, Devices: []int{3 + i%2}, Milli: m / 2, MemoryMiB: 4096}).Obj())
	}
	return node, pods
}

// BenchmarkFitScore is the engine's per-node work in one scheduling cycle:
// Filter (Check) and Score (Place + Score) on an 8-GPU node whose view
// is cached, as it is for every node that did not change since the last cycle.
func BenchmarkFitScore(b *testing.B) {
	node, pods := busyNode(b, "n")
	ledger := gpu.NewLedger()
	policy := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{Weights: gpu.Weights{GPU: 1, Memory: 1}})
	for _, tc := range []struct {
		name   string
		demand gpu.Demand
	}{
		{"share", gpu.Demand{Count: 1, Milli: 250, MemoryMiB: 8192}},
		{"whole-2", gpu.Demand{Count: 2, Milli: 1000}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			req := gpu.Request{Demand: &tc.demand}
			for b.Loop() {
				n := ledger.Node(node, 1, slices.Values(pods))
				if fit := gpu.Check(n, &req); !fit.OK() {
					b.Fatal(fit.Reasons)
				}
				n = ledger.Node(node, 1, slices.Values(pods))
				chosen, _ := policy.Place(n, &req)
				policy.Score(n, &req, chosen)
			}
		})
	}
}

// BenchmarkLedgerRebuild is what a newly started scheduler does before it
// can place GPUs: read every node's inventory and every bound pod's
// assignment. 5000 8-GPU nodes, 10 pods each (50,000 pods).
func BenchmarkLedgerRebuild(b *testing.B) {
	const nodes, podsPerNode = 5000, 10
	type nodePods struct {
		node *v1.Node
		pods []*v1.Pod
	}
	cluster := make([]nodePods, nodes)
	for i := range cluster {
		name := fmt.Sprintf("node-%d", i)
		cluster[i].node = gt.MakeGPUNode(name).GFD("A100", 8, 81920).Obj()
		for j := range podsPerNode {
			a := gpu.Assignment{Node: name, Devices: []int{j % 8}, Milli: 100, MemoryMiB: 1024}
			cluster[i].pods = append(cluster[i].pods, gt.MakeGPUPod(fmt.Sprintf("%s-%d", name, j)).Node(name).Assigned(a).Obj())
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		l := gpu.NewLedger()
		for i := range cluster {
			l.Node(cluster[i].node, 1, slices.Values(cluster[i].pods))
		}
	}
}

// BenchmarkFitScoreAcrossNodes is the same per-node work as BenchmarkFitScore,
// but over 5000 distinct nodes in turn, as a scheduling cycle visits them: the
// nodes' views do not stay in the CPU cache between visits. ns/op is per node.
func BenchmarkFitScoreAcrossNodes(b *testing.B) {
	const nodes = 5000
	type nodePods struct {
		node *v1.Node
		pods []*v1.Pod
	}
	cluster := make([]nodePods, nodes)
	ledger := gpu.NewLedger()
	for i := range cluster {
		cluster[i].node, cluster[i].pods = busyNode(b, fmt.Sprintf("node-%d", i))
		ledger.Node(cluster[i].node, 1, slices.Values(cluster[i].pods))
	}
	policy := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 250}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c := &cluster[i%nodes]
		i++
		n := ledger.Node(c.node, 1, slices.Values(c.pods))
		if fit := gpu.Check(n, &req); !fit.OK() {
			b.Fatal(fit.Reasons)
		}
		n = ledger.Node(c.node, 1, slices.Values(c.pods))
		chosen, _ := policy.Place(n, &req)
		policy.Score(n, &req, chosen)
	}
}

// BenchmarkFragmentationScore is Place + Score for one 8-GPU node with the
// fragmentation-aware policies, FGD, FragFit and PairFit (the default),
// against 20 typical pods (the default Alibaba workload has 19 shapes
// covering 95%); PairFit-models with a third of them limited to models, on
// a fleet of three models (its GPUs' room priced by class, with a
// pressure on the T4s).
func BenchmarkFragmentationScore(b *testing.B) {
	node, pods := busyNode(b, "n")
	n := gpu.NewLedger().Node(node, 1, slices.Values(pods))
	shapes := twentyShapes()
	host := gpu.Host{Known: true, FreeMilliCPU: 64000, FreeMemoryMiB: 1 << 20}
	for _, p := range []struct {
		name   string
		policy *gpu.Policy
	}{
		{"FGD", gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: shapes})},
		{"FragFit", gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: shapes})},
		{"PairFit", gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes})},
		{"FragFit-models", gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: modelShapes(shapes), Fleet: benchFleet{}})},
		{"PairFit-models", gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: modelShapes(shapes), Fleet: benchFleet{}})},
		{"PairFit-models-room", gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: modelShapes(shapes), Fleet: newBenchRoomFleet(b)})},
	} {
		for _, tc := range []struct {
			name   string
			demand gpu.Demand
		}{
			{"share", gpu.Demand{Count: 1, Milli: 250, MilliCPU: 4000}},
			{"whole-2", gpu.Demand{Count: 2, Milli: 1000, MilliCPU: 16000}},
		} {
			b.Run(p.name+"/"+tc.name, func(b *testing.B) {
				b.ReportAllocs()
				req := gpu.Request{Demand: &tc.demand, Host: host}
				p.policy.Place(n, &req) // PairFit prices the typical pods on first use
				for b.Loop() {
					chosen, _ := p.policy.Place(n, &req)
					p.policy.Score(n, &req, chosen)
				}
			})
		}
	}
}

// BenchmarkPairFitPrices is PairFit's pricing of typical pods (the packing
// LP and the knapsack over one GPU), which a live scheduler pays each time
// the item mix of its learned typical pods changes: "trace" is the eight
// item sizes of the default Alibaba workload's typical pods, in its
// proportions; "20-sizes" twenty sizes from 100 to 955 milli-GPU.
func BenchmarkPairFitPrices(b *testing.B) {
	var trace gpu.StaticShapes
	for _, s := range []struct {
		milli  int64
		weight float64
	}{{1000, 0.55}, {810, 0.15}, {470, 0.1}, {320, 0.05}, {650, 0.04}, {230, 0.02}, {460, 0.02}, {590, 0.01}} {
		trace = append(trace, gpu.TypicalPod{Demand: gpu.Demand{Count: 1, Milli: s.milli}, Weight: s.weight})
	}
	twenty := twentyShapes()
	for _, tc := range []struct {
		name   string
		shapes gpu.StaticShapes
	}{{"trace", trace}, {"20-sizes", twenty}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				gpu.PairFitPrices(tc.shapes)
			}
		})
	}
}

// modelShapes is shapes with every third one limited to a model: A100,
// then T4, then A100 or V100 in turn.
func modelShapes(shapes gpu.StaticShapes) gpu.StaticShapes {
	out := slices.Clone(shapes)
	limits := [][]string{{"A100"}, {"T4"}, {"A100", "V100"}}
	for i := 0; i < len(out); i += 3 {
		out[i].Demand.Models = limits[i/3%len(limits)]
	}
	return out
}

// benchFleet is a fleet of three models, with fewer T4s than the T4
// shapes need (modelShapes).
type benchFleet struct{}

var benchCensus = gpu.ModelGPUs{{Model: "A100", GPUs: 400}, {Model: "T4", GPUs: 50}, {Model: "V100", GPUs: 200}}

func (benchFleet) GPUsByModel() gpu.ModelGPUs { return benchCensus }

// benchRoomFleet is benchFleet with its free room known (gpu.FleetRoom):
// a T4 node idle and an A100 node half used, so that the T4s' pressure is
// lifted and the pressure is looked up as a live scheduler's ledger does.
type benchRoomFleet struct {
	benchFleet
	room *gpu.RoomCount
}

func newBenchRoomFleet(b *testing.B) benchRoomFleet {
	f := benchRoomFleet{room: new(gpu.RoomCount)}
	f.room.Replace(nil, gpu.NewLedger().Node(gt.MakeGPUNode("t4").GFD("T4", 8, 0).Obj(), 1, slices.Values([]*v1.Pod(nil))))
	node, pods := busyNode(b, "a100")
	f.room.Replace(nil, gpu.NewLedger().Node(node, 1, slices.Values(pods)))
	return f
}

func (f benchRoomFleet) RoomByModel() *gpu.FreeRoom { return f.room.RoomByModel() }

// twentyShapes is 20 typical pods of equal weight: shares of 100 to 955
// milli-GPU and pods of 1 to 3 whole GPUs, with 2 to 8 CPUs.
func twentyShapes() gpu.StaticShapes {
	var shapes gpu.StaticShapes
	for i := range 20 {
		d := gpu.Demand{Count: 1, Milli: int64(100 + 45*i), MilliCPU: int64(2000 * (1 + i%4))}
		if i%5 == 0 {
			d.Milli = 1000
			d.Count = 1 + i%3
		}
		shapes = append(shapes, gpu.TypicalPod{Demand: d, Weight: 0.05})
	}
	return shapes
}
