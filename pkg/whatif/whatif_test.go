package whatif

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// The policies' engine scores, before NormalizeScore's rescaling (see
// pkg/gpu/basic.go), for a whole-GPU pod on a node of c GPUs with u
// allocated:
//
//	BestFit = 10⁶ × (u + pod) / c      Spread = 10⁶ − BestFit
//
// Both are rescaled min-max to 0..100, so the best node gets 100. Ties go
// to the node drawn first by the seed: seed 42 orders 2 nodes [0 1], 3
// nodes [2 0 1]; seed 1 orders 2 nodes [1 0] (TestWhatIfTieBreakRank).

func a100(name string, gpus int) *gt.NodeWrapper {
	return gt.MakeGPUNode(name).GFD("NVIDIA-A100-SXM4-80GB", gpus, 81920)
}

func h100(name string) *gt.NodeWrapper {
	return gt.MakeGPUNode(name).GFD("NVIDIA-H100-80GB-HBM3", 8, 81920)
}

// live is a pod bound to node holding GPUs (whole when milli is 1000).
func live(name, node string, milli int64, gpus ...int) *gt.PodWrapper {
	p := gt.MakeGPUPod(name).Node(node).Assigned(gpu.Assignment{Node: node, Devices: gpus, Milli: milli})
	if milli == gpu.MilliPerGPU {
		return p.GPUs(len(gpus))
	}
	return p.Milli(milli)
}

func tainted(n *v1.Node) *v1.Node {
	n.Spec.Taints = []v1.Taint{{Key: "dedicated", Value: "train", Effect: v1.TaintEffectNoSchedule}}
	return n
}

func tolerating(p *v1.Pod) *v1.Pod {
	p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "train", Effect: v1.TaintEffectNoSchedule}}
	return p
}

func selecting(p *v1.Pod, key, value string) *v1.Pod {
	p.Spec.NodeSelector = map[string]string{key: value}
	return p
}

func noExecute(n *v1.Node) *v1.Node {
	n.Spec.Taints = []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoExecute}}
	return n
}

// avoiding requires, by node affinity, nodes whose label key is not value.
func avoiding(p *v1.Pod, key, value string) *v1.Pod {
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpNotIn, Values: []string{value}}},
		}}},
	}}
	return p
}

// naming requires, by node affinity, the nodes named in every list (one
// term whose matchFields are the lists, ANDed).
func naming(p *v1.Pod, lists ...[]string) *v1.Pod {
	var term v1.NodeSelectorTerm
	for _, names := range lists {
		term.MatchFields = append(term.MatchFields, v1.NodeSelectorRequirement{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: names})
	}
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{term}},
	}}
	return p
}

// resized records in the pod's status that its container was given cpu.
func resized(p *v1.Pod, cpu string) *v1.Pod {
	p.Status.ContainerStatuses = []v1.ContainerStatus{{
		Name:               p.Spec.Containers[0].Name,
		AllocatedResources: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
		Resources:          &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
	}}
	return p
}

func cordoned(n *v1.Node) *v1.Node {
	n.Spec.Unschedulable = true
	return n
}

// outcome is a placement as the tables write it: "node" or "node:0,1"
// (with GPUs), or "!reason" for a pod that fits nowhere.
func outcome(p Placement) string {
	if !p.Placed() {
		return "!" + p.Reason
	}
	if len(p.GPUs) == 0 {
		return p.Node
	}
	gpus := make([]string, len(p.GPUs))
	for i, g := range p.GPUs {
		gpus[i] = string(rune('0' + g))
	}
	return p.Node + ":" + strings.Join(gpus, ",")
}

// advertising is node with its kubelet advertising allocatable of
// gpusched.io/gpu-milli, as the node agent's shares device plugin makes it.
func advertising(node *v1.Node, allocatable string) *v1.Node {
	node.Status.Allocatable[gpu.ResourceMilli] = resource.MustParse(allocatable)
	return node
}

func TestWhatIfPlacements(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		seed   int64
		in     Input
		want   []string
	}{{
		// a: 2 of 4 GPUs taken. BestFit: a = 10⁶×3/4 = 750000, b = 10⁶×1/4 = 250000: a,
		// on its lowest free GPU, 2.
		name: "best fit packs beside the live pod", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 4).Obj(), a100("b", 4).Obj()},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		},
		want: []string{"a:2"},
	}, {
		// Spread: a = 10⁶ − 750000 = 250000, b = 10⁶ − 250000 = 750000: b, GPU 0.
		name: "spread chooses the idle node", policy: "Spread", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 4).Obj(), a100("b", 4).Obj()},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		},
		want: []string{"b:0"},
	}, {
		// a's 4 GPUs are all taken: 3 pods of 4 GPUs fit nowhere.
		name: "a full cluster", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 4).Obj()},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1, 2, 3).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p1").GPUs(4).Obj(), gt.MakeGPUPod("p2").GPUs(4).Obj()},
		},
		want: []string{"!0/1 nodes are available: 1 insufficient free GPUs.", "!0/1 nodes are available: 1 insufficient free GPUs."},
	}, {
		// Two 8-GPU nodes added. Nodes in order a, x1, x2; seed 42 draws
		// [2 0 1]: x2 first. p1: x1 = x2 = 10⁶×4/8: the tie goes to x2.
		// p2: x2 = 10⁶×8/8 beats x1 = 10⁶×4/8. p3: only x1 has 4 free.
		name: "fits once two nodes are added", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:      []*v1.Node{a100("a", 4).Obj()},
			Pods:       []*v1.Pod{live("train", "a", 1000, 0, 1, 2, 3).Obj()},
			ExtraNodes: []*v1.Node{h100("x1").Obj(), h100("x2").Obj()},
			NewPods:    []*v1.Pod{gt.MakeGPUPod("p1").GPUs(4).Obj(), gt.MakeGPUPod("p2").GPUs(4).Obj(), gt.MakeGPUPod("p3").GPUs(4).Obj()},
		},
		want: []string{"x2:0,1,2,3", "x2:4,5,6,7", "x1:0,1,2,3"},
	}, {
		// Live state: GPU 0 by annotation; a bound GPU pod without one holds
		// what best fit gives it, GPU 1; so 1 GPU of 3 is free. And 60 of
		// 64 CPUs are requested: a 1-GPU pod asking 8 CPUs does not fit.
		// Terminated pods, pending pods and pods on nodes not listed hold
		// nothing.
		name: "live pods hold GPUs and CPU", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes: []*v1.Node{a100("a", 3).Obj()},
			Pods: []*v1.Pod{
				live("annotated", "a", 1000, 0).CPU("30").Obj(),
				gt.MakeGPUPod("unannotated").GPUs(1).CPU("30").Node("a").Obj(),
				gt.MakeGPUPod("done").GPUs(3).Node("a").Phase(v1.PodSucceeded).Obj(),
				gt.MakeGPUPod("pending").GPUs(3).Obj(),
				gt.MakeGPUPod("elsewhere").GPUs(3).CPU("64").Node("not-listed").Obj(),
			},
			NewPods: []*v1.Pod{gt.MakeGPUPod("two").GPUs(2).Obj(), gt.MakeGPUPod("cpu").GPUs(1).CPU("8").Obj(), gt.MakeGPUPod("one").GPUs(1).CPU("4").Obj()},
		},
		want: []string{"!0/1 nodes are available: 1 insufficient free GPUs.", "!0/1 nodes are available: 1 Insufficient cpu.", "a:2"},
	}, {
		// A pod resized in place from 4 CPUs to 40 holds 40 (the larger of
		// its spec and its status, as the scheduler counts it): of 64, 24
		// are left, too few for 30, enough for 24.
		name: "a pod resized in place", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 2).Obj()},
			Pods:    []*v1.Pod{resized(live("grown", "a", 1000, 0).CPU("4").Obj(), "40")},
			NewPods: []*v1.Pod{gt.MakeGPUPod("big").GPUs(1).CPU("30").Obj(), gt.MakeGPUPod("fits").GPUs(1).CPU("24").Obj()},
		},
		want: []string{"!0/1 nodes are available: 1 Insufficient cpu.", "a:1"},
	}, {
		// Shares as a resource: a's kubelet advertises gpusched.io/gpu-milli
		// with none allocatable (the agent's plugin restarting), so both go
		// to b, which does not advertise it, as GPUResourcesFit decides.
		name: "shares kept off a node whose kubelet would refuse them", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{advertising(a100("a", 1).Obj(), "0"), a100("b", 1).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("s").MilliResource(300).Obj(), gt.MakeGPUPod("t").MilliResource(300).Obj()},
		},
		want: []string{"b:0", "b:0"},
	}, {
		// A share goes beside a live share: a's GPU 0 has 500 free, the
		// tightest fitting GPU; b is idle. BestFit a = 10⁶×(500+300)/1000.
		name: "a share on the partly used GPU", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 1).Obj(), a100("b", 1).Obj()},
			Pods:    []*v1.Pod{live("half", "a", 500, 0).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("s").Milli(300).Obj(), gt.MakeGPUPod("t").Milli(300).Obj()},
		},
		// t: a has 200 free, too little; b alone is feasible.
		want: []string{"a:0", "b:0"},
	}, {
		// a is best fit (2 of 4 taken) but tainted: the first pod goes to b;
		// the one that tolerates the taint goes to a.
		name: "taints keep pods off", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{tainted(a100("a", 4).Obj()), a100("b", 4).Obj()},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj(), tolerating(gt.MakeGPUPod("q").GPUs(1).Obj())},
		},
		// q: a = 10⁶×3/4 = 750000, b (1 taken) = 10⁶×2/4 = 500000.
		want: []string{"b:0", "a:2"},
	}, {
		// Best fit would take a; the selector allows b alone.
		name: "node selector", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 4).Label("pool", "x").Obj(), a100("b", 4).Label("pool", "y").Obj()},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{selecting(gt.MakeGPUPod("p").GPUs(1).Obj(), "pool", "y"), selecting(gt.MakeGPUPod("q").GPUs(1).Obj(), "pool", "z")},
		},
		want: []string{"b:0", "!0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."},
	}, {
		// p requires pool not in [x] by node affinity: a does not match, and
		// b has a NoExecute taint p does not tolerate, so p fits nowhere.
		// q, without the affinity, can go to a only.
		name: "required node affinity and NoExecute", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 4).Label("pool", "x").Obj(), noExecute(a100("b", 4).Label("pool", "y").Obj())},
			Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{avoiding(gt.MakeGPUPod("p").GPUs(1).Obj(), "pool", "x"), gt.MakeGPUPod("q").GPUs(1).Obj()},
		},
		want: []string{"!0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s).", "a:2"},
	}, {
		// Nodes named by metadata.name: NodeAffinity's PreFilter limits the
		// cycle to them, so p goes to b though best fit prefers a, and q
		// (8 GPUs) is told about b alone: "0/1 nodes". r's two lists have
		// no node in common.
		name: "nodes named by affinity", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes: []*v1.Node{a100("a", 4).Obj(), a100("b", 4).Obj()},
			Pods:  []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
			NewPods: []*v1.Pod{
				naming(gt.MakeGPUPod("p").GPUs(1).Obj(), []string{"b"}),
				naming(gt.MakeGPUPod("q").GPUs(8).Obj(), []string{"b"}),
				naming(gt.MakeGPUPod("r").GPUs(1).Obj(), []string{"a"}, []string{"b"}),
			},
		},
		want: []string{"b:0", "!0/1 nodes are available: 1 too few GPUs on node.", "!pod affinity terms conflict"},
	}, {
		// The GPU check comes first: a has too few GPUs, b is cordoned.
		name: "cordoned nodes and GPU reasons first", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{tainted(a100("a", 1).Obj()), cordoned(a100("b", 4).Obj())},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(2).Obj()},
		},
		want: []string{"!0/2 nodes are available: 1 node(s) were unschedulable, 1 too few GPUs on node."},
	}, {
		// Equal nodes, equal scores: seed 42 orders 2 nodes [0 1], so n1.
		name: "ties by node order, seed 42", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("n1", 4).Obj(), a100("n2", 4).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		},
		want: []string{"n1:0"},
	}, {
		// Seed 1 orders 2 nodes [1 0]: n2 comes first.
		name: "ties by node order, seed 1", policy: "BestFit", seed: 1,
		in: Input{
			Nodes:   []*v1.Node{a100("n1", 4).Obj(), a100("n2", 4).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		},
		want: []string{"n2:0"},
	}, {
		// A pod without GPUs is not scored by a GPU-only policy: every
		// node scores 0 and the first in seed 1's order, n2, takes it,
		// though n1 has the GPU pod.
		name: "a pod without GPUs goes by node order", policy: "BestFit", seed: 1,
		in: Input{
			Nodes:   []*v1.Node{a100("n1", 4).Obj(), a100("n2", 4).Obj()},
			Pods:    []*v1.Pod{live("train", "n1", 1000, 0).Obj()},
			NewPods: []*v1.Pod{gt.MakeGPUPod("web").CPU("2").Obj()},
		},
		want: []string{"n2"},
	}, {
		// 110 pods allocatable, 110 bound: the node is full.
		name: "the pod count", policy: "BestFit", seed: DefaultSeed,
		in: Input{
			Nodes:   []*v1.Node{a100("a", 1).Obj()},
			Pods:    manyPods("a", 110),
			NewPods: []*v1.Pod{gt.MakeGPUPod("p").Obj()},
		},
		want: []string{"!0/1 nodes are available: 1 Too many pods."},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results, err := Run(tt.in, Options{Policies: []string{tt.policy}, Seed: tt.seed})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range results[0].Placements {
				got = append(got, outcome(p))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("placements:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func manyPods(node string, n int) []*v1.Pod {
	out := make([]*v1.Pod, n)
	for i := range out {
		out[i] = gt.MakeGPUPod("web-" + string(rune('a'+i/26)) + string(rune('a'+i%26))).Node(node).Obj()
	}
	return out
}

// TestWhatIfSummary: allocation and counts before and after, and every
// policy asked, in order.
func TestWhatIfSummary(t *testing.T) {
	in := Input{
		Nodes:      []*v1.Node{a100("a", 4).Obj()},
		Pods:       []*v1.Pod{live("train", "a", 1000, 0, 1).Obj()},
		ExtraNodes: []*v1.Node{a100("b", 4).Obj()},
		NewPods:    []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUPod("q").GPUs(8).Obj()},
	}
	results, err := Run(in, Options{Policies: []string{"Spread", DefaultPolicy}, Seed: DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{results[0].Policy, results[1].Policy}; !slices.Equal(got, []string{"Spread", "default (PairFit)"}) {
		t.Errorf("policies = %q", got)
	}
	s := results[0].Summary
	// Capacity 8 GPUs = 8000; 2000 allocated before (25%), 3000 after
	// (37.5%): p placed, q (8 GPUs on 4-GPU nodes) not.
	want := Summary{Placed: 1, Unplaced: 1, CapacityMilli: 8000,
		AllocatedMilliBefore: 2000, AllocatedMilliAfter: 3000, AllocatedPctBefore: 25, AllocatedPctAfter: 37.5}
	s.FragmentedMilliBefore, s.FragmentedMilliAfter, s.FragmentedPctBefore, s.FragmentedPctAfter = 0, 0, 0, 0
	if s != want {
		t.Errorf("summary = %+v\nwant %+v", s, want)
	}
}

// TestWhatIfFragmentation: the measure against the typical pods. The
// typical pods are the four GPU pods, bound and new: three of 1 GPU
// (weight ¾) and one of 8 (weight ¼). A 1-GPU pod can use every free
// GPU, an 8-GPU pod none on these 4-GPU nodes. Before: a has 2 free GPUs,
// ¼ × 2000 = 500; b has 4, ¼ × 4000 = 1000: 1500 in all, 18.75% of 8000.
// FragFit puts p on a (both nodes' fragment falls by 250, and a keeps
// fewer GPUs free): a ¼ × 1000 = 250, b 1000: 1250 after, 15.625%,
// rounded half to even as the simulator rounds: 15.62.
func TestWhatIfFragmentation(t *testing.T) {
	in := Input{
		Nodes:   []*v1.Node{a100("a", 4).Obj(), a100("b", 4).Obj()},
		Pods:    []*v1.Pod{live("t1", "a", 1000, 0).Obj(), live("t2", "a", 1000, 1).Obj()},
		NewPods: []*v1.Pod{gt.MakeGPUPod("q").GPUs(8).Obj(), gt.MakeGPUPod("p").GPUs(1).Obj()},
	}
	results, err := Run(in, Options{Policies: []string{"FragFit"}, Seed: DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	s := results[0].Summary
	if got := outcome(results[0].Placements[1]); got != "a:2" {
		t.Errorf("p = %s, want a:2", got)
	}
	tests := []struct {
		name      string
		got, want float64
	}{
		{"milli before", s.FragmentedMilliBefore, 1500},
		{"% before", s.FragmentedPctBefore, 18.75},
		{"milli after", s.FragmentedMilliAfter, 1250},
		{"% after", s.FragmentedPctAfter, 15.62},
	}
	for _, tt := range tests {
		if d := tt.got - tt.want; d < -1e-6 || d > 1e-6 {
			t.Errorf("fragmented %s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestWhatIfNotModeled: constraints what-if does not check are named.
func TestWhatIfNotModeled(t *testing.T) {
	p := gt.MakeGPUPod("p").GPUs(1).Obj()
	p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: v1.DoNotSchedule}}
	p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}}}
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}}
	results, err := Run(Input{Nodes: []*v1.Node{a100("a", 1).Obj()}, NewPods: []*v1.Pod{p}}, Options{Policies: []string{"BestFit"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"inter-pod anti-affinity", "topology spread", "DRA resource claims"}
	if got := results[0].Placements[0].NotModeled; !slices.Equal(got, want) {
		t.Errorf("not modeled = %q, want %q", got, want)
	}
}

// TestWhatIfErrors: malformed input is an error that names the object,
// the field, the value and what is allowed.
func TestWhatIfErrors(t *testing.T) {
	node := a100("a", 4).Obj()
	tests := []struct {
		name     string
		in       Input
		policies []string
		want     []string // substrings of the error
	}{
		{"unknown policy", Input{Nodes: []*v1.Node{node}}, []string{"BestFt"},
			[]string{`policies[0]`, `unknown policy "BestFt"`, "BestFit", "or default"}},
		{"policy twice", Input{Nodes: []*v1.Node{node}}, []string{"Spread", "Spread"},
			[]string{`policies[1]`, `"Spread" is listed twice`}},
		{"no nodes", Input{}, nil, []string{"nodes: want at least one node"}},
		{"node twice", Input{Nodes: []*v1.Node{node}, ExtraNodes: []*v1.Node{node}}, nil,
			[]string{`extraNodes[0]`, `node "a" is listed twice`}},
		{"nil node", Input{Nodes: []*v1.Node{nil}}, nil, []string{"nodes[0]: want a Node"}},
		{"malformed share", Input{Nodes: []*v1.Node{node}, NewPods: []*v1.Pod{gt.MakeGPUPod("p").Milli(1500).Obj()}}, nil,
			[]string{"newPods[0]", "default/p", gpu.AnnotationMilli, `"1500"`, "from 1 to 999"}},
		{"malformed assignment", Input{Nodes: []*v1.Node{node}, Pods: []*v1.Pod{
			gt.MakeGPUPod("b").GPUs(1).Node("a").Annotation(gpu.AnnotationAssigned, "node=a;gpus=x").Obj()}}, nil,
			[]string{"pods[0] (default/b)", gpu.AnnotationAssigned, `"x"`, "want node=<node>"}},
		{"assignment for another node", Input{Nodes: []*v1.Node{node}, Pods: []*v1.Pod{
			gt.MakeGPUPod("b").GPUs(1).Node("a").Annotation(gpu.AnnotationAssigned, "node=z;gpus=0").Obj()}}, nil,
			[]string{"pods[0] (default/b)", `names node "z"`, `bound to "a"`}},
		{"malformed demand of a bound pod without assignment", Input{Nodes: []*v1.Node{node}, Pods: []*v1.Pod{
			gt.MakeGPUPod("b").Node("a").Annotation(gpu.AnnotationModels, "[").Obj()}}, nil,
			[]string{"pods[0] (default/b)", gpu.AnnotationModels, "JSON array"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(tt.in, Options{Policies: tt.policies})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestWhatIfLeavesInputAlone: Run changes none of its input, and two runs
// agree.
func TestWhatIfLeavesInputAlone(t *testing.T) {
	in := Input{
		Nodes:   []*v1.Node{a100("a", 4).Obj(), a100("b", 4).Obj()},
		Pods:    []*v1.Pod{live("train", "a", 1000, 0, 1).CPU("4").Obj()},
		NewPods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).CPU("2").Obj(), gt.MakeGPUPod("s").Milli(250).Obj()},
	}
	before := []*v1.Pod{in.Pods[0].DeepCopy(), in.NewPods[0].DeepCopy(), in.NewPods[1].DeepCopy()}
	first, err := Run(in, Options{Seed: DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(gpu.PolicyNames()) {
		t.Errorf("%d results for every policy, want %d", len(first), len(gpu.PolicyNames()))
	}
	second, _ := Run(in, Options{Seed: DefaultSeed})
	for i := range first {
		for j := range first[i].Placements {
			if a, b := outcome(first[i].Placements[j]), outcome(second[i].Placements[j]); a != b {
				t.Errorf("%s, pod %d: %s then %s", first[i].Policy, j, a, b)
			}
		}
	}
	for i, p := range []*v1.Pod{in.Pods[0], in.NewPods[0], in.NewPods[1]} {
		if p.Spec.NodeName != before[i].Spec.NodeName || len(p.Annotations) != len(before[i].Annotations) {
			t.Errorf("pod %s changed", p.Name)
		}
	}
}
