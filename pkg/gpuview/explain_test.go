package gpuview_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

func whole(node string, devices ...int) gpu.Assignment {
	return gpu.Assignment{Node: node, Devices: devices, Milli: gpu.MilliPerGPU}
}

func share(node string, device int, milli, memoryMiB int64) gpu.Assignment {
	return gpu.Assignment{Node: node, Devices: []int{device}, Milli: milli, MemoryMiB: memoryMiB}
}

func bound(name string, a gpu.Assignment, priority int32) *v1.Pod {
	w := gt.MakeGPUPod(name).Namespace("ml").Node(a.Node).Assigned(a).Priority(priority)
	if a.Milli < gpu.MilliPerGPU {
		w = w.Milli(a.Milli)
	} else {
		w = w.GPUs(len(a.Devices))
	}
	return w.Obj()
}

// TestExplainSnapshot: the snapshot's allocation, holders and fragmentation.
func TestExplainSnapshot(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 2, 40960).Obj(), gt.MakeGPUNode("cpu").Obj()}
	pods := []*v1.Pod{
		bound("w", whole("a", 0), 0),
		bound("s", share("a", 1, 500, 10240), 5),
		gt.MakeGPUPod("p").Namespace("ml").Milli(600).Obj(),
	}
	s := gpuview.Build(nodes, pods, gpuview.Options{})
	if len(s.Nodes) != 1 {
		t.Fatalf("nodes = %d, want 1 (the node without GPUs left out)", len(s.Nodes))
	}
	n := s.Nodes[0]
	// 1000 (w) + 500 (s) of 2000.
	if n.AllocatedMilli != 1500 || n.CapacityMilli != 2000 || s.Cluster.AllocatedPct() != 75 {
		t.Errorf("allocated %d of %d (%.1f%%), want 1500 of 2000 (75%%)", n.AllocatedMilli, n.CapacityMilli, s.Cluster.AllocatedPct())
	}
	if h := n.GPUs[1].Holders; len(h) != 1 || h[0].Name != "s" || h[0].Priority != 5 || h[0].MemoryMiB != 10240 {
		t.Errorf("GPU 1 holders = %+v, want s (priority 5, 10240 MiB)", h)
	}
	// Typical pods: 1 GPU (w), 500 (s), 600 (p), a third each. GPU 1 has 500
	// free: the 1-GPU and 600 shapes cannot use it, the 500 shape can:
	// 500 × 2/3 ≈ 333.3.
	if got := s.Cluster.FragmentedMilli; got < 333 || got > 334 {
		t.Errorf("fragmented = %.1f, want 500 × 2/3 ≈ 333.3", got)
	}
	if len(s.Pending) != 1 || s.Pending[0].Name != "p" || s.Pending[0].QueuePosition != 1 {
		t.Errorf("pending = %+v, want p first in the queue", s.Pending)
	}
}

// TestExplain covers each kind of answer.
func TestExplain(t *testing.T) {
	a100 := func(name string, count int) *v1.Node { return gt.MakeGPUNode(name).GFD("A100", count, 40960).Obj() }
	cases := []struct {
		name  string
		nodes []*v1.Node
		pods  []*v1.Pod
		pod   *v1.Pod
		// want are substrings of the verdict, in order.
		want []string
		// wantFix is the first fix's node and holders, when one is expected.
		wantFix     string
		wantHolders []string
	}{{
		name:  "memory held by named pods",
		nodes: []*v1.Node{a100("a", 1)},
		// GPU 0: 300 + 300 milli and 16 + 16 GiB held; 400 milli and 8 GiB free.
		pods: []*v1.Pod{bound("x", share("a", 0, 300, 16384), 0), bound("y", share("a", 0, 300, 16384), 10)},
		pod:  gt.MakeGPUPod("p").Namespace("ml").Milli(300).GPUMemory("14Gi").Obj(),
		// 14 - 8 = 6 GiB short; x (priority 0) frees 16 GiB on its own.
		want:    []string{"nothing fits now", "fits on a GPU 0 if 6 GiB are freed — held by pod ml/x (priority 0)"},
		wantFix: "a", wantHolders: []string{"x"},
	}, {
		name:  "whole GPUs: the cheapest holders go",
		nodes: []*v1.Node{a100("a", 2), a100("b", 2)},
		// a: both GPUs held at priority 100; b: GPU 0 at priority 1, GPU 1 free.
		pods: []*v1.Pod{bound("hi", whole("a", 0, 1), 100), bound("lo", whole("b", 0), 1)},
		pod:  gt.MakeGPUPod("p").Namespace("ml").GPUs(2).Obj(),
		// b needs one GPU freed (lo, priority 1); a needs two (hi, priority 100).
		want:    []string{"fits on b if GPU 0 is freed — held by pod ml/lo (priority 1)"},
		wantFix: "b", wantHolders: []string{"lo"},
	}, {
		name:  "model mismatch",
		nodes: []*v1.Node{a100("a", 2), gt.MakeGPUNode("t").GFD("T4", 4, 16384).Obj()},
		pod:   gt.MakeGPUPod("p").Namespace("ml").GPUs(1).Models("H100").Obj(),
		want:  []string{"fits nowhere in this cluster: no GPU model matches [H100] (the cluster has 2× A100, 4× T4)"},
	}, {
		name:  "too many GPUs for any node",
		nodes: []*v1.Node{a100("a", 4), a100("b", 4)},
		pod:   gt.MakeGPUPod("p").Namespace("ml").GPUs(8).Obj(),
		want:  []string{"fits nowhere in this cluster: no schedulable node has 8 suitable GPUs (the most on one node is 4)"},
	}, {
		name:  "memory larger than any GPU",
		nodes: []*v1.Node{a100("a", 4)},
		pod:   gt.MakeGPUPod("p").Namespace("ml").GPUs(1).GPUMemory("80Gi").Obj(),
		want:  []string{"no allowed GPU has 81920 MiB of memory (the largest has 40960 MiB)"},
	}, {
		name:  "fits now",
		nodes: []*v1.Node{a100("a", 1), a100("b", 1)},
		pod:   gt.MakeGPUPod("p").Namespace("ml").GPUs(1).Obj(),
		want:  []string{"it fits now on a, b"},
	}, {
		name:  "host CPU short",
		nodes: []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 1, 40960).CPU("2").Obj()},
		pod:   gt.MakeGPUPod("p").Namespace("ml").GPUs(1).CPU("4").Obj(),
		want:  []string{"fits on a once the node has: insufficient cpu (2000m free, 4000m asked)"},
	}, {
		name:  "invalid request",
		nodes: []*v1.Node{a100("a", 1)},
		pod:   gt.MakeGPUPod("p").Namespace("ml").Milli(300).GPUMemory("lots").Obj(),
		want:  []string{"its GPU request is invalid", "gpusched.io/gpu-memory", `"lots"`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pods := append(tc.pods, tc.pod)
			s := gpuview.Build(tc.nodes, pods, gpuview.Options{})
			e := s.Explain(tc.pod, pods, nil)
			rest := e.Verdict
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("verdict %q lacks %q", e.Verdict, w)
				}
				rest = rest[i+len(w):]
			}
			if tc.wantFix == "" {
				return
			}
			if len(e.Fixes) == 0 || e.Fixes[0].Node != tc.wantFix {
				t.Fatalf("fixes = %+v, want the first on %s", e.Fixes, tc.wantFix)
			}
			var got []string
			for _, h := range e.Fixes[0].Holders {
				got = append(got, h.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.wantHolders, ",") {
				t.Errorf("holders = %v, want %v", got, tc.wantHolders)
			}
		})
	}
}

// TestExplainPerGPUReasons: each GPU's reason is the engine's.
func TestExplainPerGPUReasons(t *testing.T) {
	node := gt.MakeGPUNode("a").Devices(
		gpu.Device{Index: 0, Model: "A100", MemoryMiB: 40960},
		gpu.Device{Index: 1, Model: "T4", MemoryMiB: 16384},
		gpu.Device{Index: 2, Model: "A100", MemoryMiB: 40960, Unhealthy: "XID 79"},
		gpu.Device{Index: 3, Model: "A100", MemoryMiB: 40960},
	).Obj()
	pods := []*v1.Pod{bound("x", share("a", 0, 800, 0), 0), bound("y", share("a", 3, 100, 36864), 0)}
	pod := gt.MakeGPUPod("p").Namespace("ml").Milli(300).GPUMemory("8Gi").Models("A100").Obj()
	e := gpuview.Build([]*v1.Node{node}, append(pods, pod), gpuview.Options{}).Explain(pod, pods, nil)
	want := []string{
		gpu.ReasonInsufficientShare.String(),  // 200 free < 300
		gpu.ReasonModelNotAllowed.String(),    // T4
		gpu.ReasonUnhealthy.String(),          // XID 79
		gpu.ReasonInsufficientMemory.String(), // 900 free, 4 GiB free < 8 GiB
	}
	if len(e.Nodes) != 1 || len(e.Nodes[0].GPUs) != 4 {
		t.Fatalf("answers = %+v", e.Nodes)
	}
	for i, w := range want {
		if got := e.Nodes[0].GPUs[i].Reason; got != w {
			t.Errorf("GPU %d: reason %q, want %q", i, got, w)
		}
	}
	// GPU 3 needs 4 GiB (y goes, 1 holder); GPU 0 needs 100 milli (x goes, 1
	// holder): equal cost, GPU 0 comes first.
	if len(e.Fixes) != 1 || e.Fixes[0].GPUs[0] != 0 || e.Fixes[0].Holders[0].Name != "x" {
		t.Errorf("fixes = %+v, want GPU 0 by freeing x", e.Fixes)
	}
}

// TestExplainGang: what a gang lacks as a whole, and in one clique.
func TestExplainGang(t *testing.T) {
	member := func(name string) *v1.Pod {
		p := gt.MakeGPUPod(name).Namespace("ml").GPUs(4).Obj()
		p.Labels = map[string]string{podgroup.LabelPodGroup: "train"}
		return p
	}
	nodes := []*v1.Node{
		gt.MakeGPUNode("a1").GFD("H100", 8, 81920).Clique("c1").Obj(),
		gt.MakeGPUNode("a2").GFD("H100", 8, 81920).Clique("c2").Obj(),
	}
	// a1: 6 GPUs held, 2 free; a2: 2 held, 6 free. Three 4-GPU members:
	// one fits on a2, the other two need 4 each, and 2 + 2 are left.
	pods := []*v1.Pod{
		bound("x", whole("a1", 0, 1, 2, 3, 4, 5), 0),
		bound("y", whole("a2", 0, 1), 0),
		member("m0"), member("m1"), member("m2"),
	}
	s := gpuview.Build(nodes, pods, gpuview.Options{})
	e := s.Explain(pods[2], pods, map[string]gpuview.GangSpec{"ml/train": {MinMember: 3}})
	g := e.Gang
	if g == nil {
		t.Fatal("no gang answer")
	}
	if g.MinMember != 3 || g.Pending != 3 || g.FitNow != 1 {
		t.Errorf("gang = %+v, want minMember 3, 3 pending, 1 fits now", g)
	}
	if !strings.Contains(g.Short, "needs 4 suitable free GPUs on one node, and the most left on one node is 2") {
		t.Errorf("short = %q", g.Short)
	}
	// 12 GPUs needed; c2 has 6 free, c1 has 2: 6 more must be freed in c2.
	if !strings.Contains(g.Clique, "the best, c2, has 6 suitable free GPUs of the 12 the gang needs; it fits in one clique if 6 more are freed there") {
		t.Errorf("clique = %q", g.Clique)
	}

	// minMember 4 with 3 members of 4 GPUs on 16 GPUs: fits nowhere.
	e = s.Explain(pods[2], pods, map[string]gpuview.GangSpec{"ml/train": {MinMember: 4}})
	if !strings.HasPrefix(e.Gang.Short, "fits nowhere in this cluster") {
		t.Errorf("short = %q, want fits nowhere", e.Gang.Short)
	}
}

// TestExplainWorkloadGang: pods of an upstream Workload API PodGroup
// (spec.schedulingGroup) are a gang too, sized by their pods.
func TestExplainWorkloadGang(t *testing.T) {
	group := "train"
	member := func(name string) *v1.Pod {
		p := gt.MakeGPUPod(name).Namespace("ml").GPUs(4).Obj()
		p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
		return p
	}
	// Two 4-GPU nodes, b's held: one member of two fits now.
	pods := []*v1.Pod{member("w0"), member("w1"), bound("x", whole("b", 0, 1, 2, 3), 0)}
	nodes := []*v1.Node{gt.MakeGPUNode("a").GFD("A100", 4, 40960).Obj(), gt.MakeGPUNode("b").GFD("A100", 4, 40960).Obj()}
	s := gpuview.Build(nodes, pods, gpuview.Options{})
	e := s.Explain(pods[0], pods, nil)
	if e.Gang == nil || e.Gang.Name != "ml/workload:train" || e.Gang.MinMember != 2 || e.Gang.FitNow != 1 {
		t.Fatalf("gang = %+v, want ml/workload:train, minMember 2 (its pods), 1 fits now", e.Gang)
	}
	if s.Pending[0].Gang != "workload:train" {
		t.Errorf("pending gang = %q", s.Pending[0].Gang)
	}
}

// TestExplainGangOneModel: the gang plugin holds a gang to one GPU model,
// and the explanation places the gang the same way.
func TestExplainGangOneModel(t *testing.T) {
	member := func(name string) *v1.Pod {
		p := gt.MakeGPUPod(name).Namespace("ml").GPUs(4).Obj()
		p.Labels = map[string]string{podgroup.LabelPodGroup: "train"}
		return p
	}
	// The playground's nodes: 2×A100:8, H100:8, 2×T4:4. Only the A100s hold
	// three 4-GPU pods (16 GPUs; the H100 holds 2, the T4s 2); a1 has 4 of
	// its 8 held and a2 all 8, so one member fits on A100 now. Across
	// models three would fit (H100 2, T4 2): the rule makes it 1.
	nodes := []*v1.Node{
		gt.MakeGPUNode("a1").GFD("A100", 8, 81920).Obj(), gt.MakeGPUNode("a2").GFD("A100", 8, 81920).Obj(),
		gt.MakeGPUNode("h").GFD("H100", 8, 81920).Obj(),
		gt.MakeGPUNode("t1").GFD("T4", 4, 16384).Obj(), gt.MakeGPUNode("t2").GFD("T4", 4, 16384).Obj(),
	}
	pods := []*v1.Pod{
		bound("x", whole("a1", 0, 1, 2, 3), 0), bound("y", whole("a2", 0, 1, 2, 3, 4, 5, 6, 7), 0),
		member("m0"), member("m1"), member("m2"),
	}
	s := gpuview.Build(nodes, pods, gpuview.Options{})
	g := s.Explain(pods[2], pods, nil).Gang
	if g == nil || strings.Join(g.Models, ",") != "A100" || g.FitNow != 1 {
		t.Fatalf("gang = %+v, want held to A100 with 1 fitting now", g)
	}
	// With the PodGroup's opt-out, any model: 2 on the H100, 1 on a T4.
	g = s.Explain(pods[2], pods, map[string]gpuview.GangSpec{"ml/train": {MinMember: 3, MixedModels: true}}).Gang
	if len(g.Models) != 0 || g.FitNow != 3 {
		t.Errorf("mixed gang = %+v, want no model held and 3 fitting now", g)
	}
}
