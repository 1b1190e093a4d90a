package extender

import (
	"maps"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// filterNodes: an 8-GPU A100 node with GPUs 0-1 taken whole and a 500-milli,
// 20 GiB share on GPU 2; a 2-GPU A100 node with both taken; a 4-GPU T4 node;
// a node whose annotation lists a T4, an A100 and an L4; a CPU node.
func filterNodes() ([]*v1.Node, []*v1.Pod) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Clique("nvl-a").Obj(),
		gt.MakeGPUNode("a100-full").GFD(a100, 2, 81920).Obj(),
		gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("mixed-0").Devices(
			gpu.Device{Index: 0, Model: t4, MemoryMiB: 15360},
			gpu.Device{Index: 1, Model: a100, MemoryMiB: 81920},
			gpu.Device{Index: 2, Model: "NVIDIA-L4", MemoryMiB: 23034},
		).Obj(),
		gt.MakeGPUNode("cpu-0").Obj(),
	}
	pods := []*v1.Pod{
		bound("w0", "a100-0", []int{0, 1}, 1000, 0),
		bound("s0", "a100-0", []int{2}, 500, 20480),
		bound("full", "a100-full", []int{0, 1}, 1000, 0),
	}
	return nodes, pods
}

// filterOutcome renders a filter result per node: "fits", "R: <message>"
// (FailedNodes, resolvable) or "U: <message>" (FailedAndUnresolvableNodes).
func filterOutcome(t *testing.T, r *extenderv1.ExtenderFilterResult) map[string]string {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("filter error: %s", r.Error)
	}
	out := map[string]string{}
	if r.NodeNames != nil {
		for _, n := range *r.NodeNames {
			out[n] = "fits"
		}
	}
	if r.Nodes != nil {
		for _, n := range r.Nodes.Items {
			out[n.Name] = "fits"
		}
	}
	for n, msg := range r.FailedNodes {
		out[n] = "R: " + msg
	}
	for n, msg := range r.FailedAndUnresolvableNodes {
		out[n] = "U: " + msg
	}
	return out
}

func TestFilter(t *testing.T) {
	const (
		fits        = "fits"
		noGPUs      = "U: node has no GPUs"
		tooFew      = "U: too few GPUs on node"
		model       = "U: GPU model not allowed"
		memSize     = "U: GPU memory below request"
		insuffGPUs  = "R: insufficient free GPUs"
		insuffShare = "R: insufficient free GPU share"
		unknown     = "R: " + MsgUnknownNode
		malformed   = `U: invalid gpusched.io/gpu-milli "half": want an integer share of one GPU in milli-GPU, from 1 to 999`
		gang        = "U: " + MsgGangPod
	)
	nodes, pods := filterNodes()
	te := newTestExtender(t, nil, nodes, pods)
	// ghost is known to no informer: by name it is unknown; as a Node object
	// (nodeCacheCapable: false) its GPUs are read from the object: 8 idle A100s.
	ghost := gt.MakeGPUNode("ghost").GFD(a100, 8, 81920).Obj()

	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		// want is the outcome per node; ghostByName and ghostObject are
		// ghost's, requested by name and as an object.
		want                     map[string]string
		ghostByName, ghostObject string
	}{{
		name: "two whole GPUs of any model",
		pod:  gt.MakeGPUPod("p").GPUs(2).Obj(),
		// a100-0 has GPUs 3-7 idle; a100-full has 2 GPUs, both taken;
		// mixed-0 has 3 idle GPUs.
		want:        map[string]string{"a100-0": fits, "a100-full": insuffGPUs, "t4-0": fits, "mixed-0": fits, "cpu-0": noGPUs},
		ghostByName: unknown, ghostObject: fits,
	}, {
		name:        "six whole GPUs: a100-0 has 8 but only 5 idle",
		pod:         gt.MakeGPUPod("p").GPUs(6).Obj(),
		want:        map[string]string{"a100-0": insuffGPUs, "a100-full": tooFew, "t4-0": tooFew, "mixed-0": tooFew, "cpu-0": noGPUs},
		ghostByName: unknown, ghostObject: fits,
	}, {
		name:        "one T4",
		pod:         gt.MakeGPUPod("p").GPUs(1).Models(t4).Obj(),
		want:        map[string]string{"a100-0": model, "a100-full": model, "t4-0": fits, "mixed-0": fits, "cpu-0": noGPUs},
		ghostByName: unknown, ghostObject: model,
	}, {
		name: "a 40 GiB share keeps off the 15 GiB T4s",
		pod:  gt.MakeGPUPod("p").Milli(500).GPUMemory("40Gi").Models(a100, t4).Obj(),
		// mixed-0: the T4 is too small, the L4 not allowed, the A100 fits.
		want:        map[string]string{"a100-0": fits, "a100-full": insuffShare, "t4-0": memSize, "mixed-0": fits, "cpu-0": noGPUs},
		ghostByName: unknown, ghostObject: fits,
	}, {
		name: "two reasons on one node",
		pod:  gt.MakeGPUPod("p").GPUs(2).Models(a100, "NVIDIA-L4").GPUMemory("40Gi").Obj(),
		// mixed-0: T4 not allowed, L4 too small: one suitable GPU of 2.
		want: map[string]string{"a100-0": fits, "a100-full": insuffGPUs, "t4-0": model,
			"mixed-0": "U: GPU model not allowed, GPU memory below request", "cpu-0": noGPUs},
		ghostByName: unknown, ghostObject: fits,
	}, {
		name:        "no GPU demand fits every node, known or not",
		pod:         gt.MakeGPUPod("p").CPU("1").Obj(),
		want:        map[string]string{"a100-0": fits, "a100-full": fits, "t4-0": fits, "mixed-0": fits, "cpu-0": fits},
		ghostByName: fits, ghostObject: fits,
	}, {
		name:        "a malformed annotation fails every node, naming it",
		pod:         gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "half").Obj(),
		want:        map[string]string{"a100-0": malformed, "a100-full": malformed, "t4-0": malformed, "mixed-0": malformed, "cpu-0": malformed},
		ghostByName: malformed, ghostObject: malformed,
	}, {
		// Placed one by one, part of a gang that can never run would
		// start and hold its GPUs: the extender refuses gang pods.
		name:        "a pod of a gang fits no node",
		pod:         gt.MakeGPUPod("p").GPUs(2).Label(podgroup.LabelPodGroup, "train").Obj(),
		want:        map[string]string{"a100-0": gang, "a100-full": gang, "t4-0": gang, "mixed-0": gang, "cpu-0": gang},
		ghostByName: gang, ghostObject: gang,
	}, {
		// A gang's launcher without GPUs: not the extender's to hold back.
		name:        "a pod of a gang without GPUs fits every node",
		pod:         gt.MakeGPUPod("p").CPU("1").Label(podgroup.LabelPodGroup, "train").Obj(),
		want:        map[string]string{"a100-0": fits, "a100-full": fits, "t4-0": fits, "mixed-0": fits, "cpu-0": fits},
		ghostByName: fits, ghostObject: fits,
	}} {
		t.Run(tc.name+"/nodeCacheCapable", func(t *testing.T) {
			names := append(slices.Sorted(maps.Keys(tc.want)), "ghost")
			var r extenderv1.ExtenderFilterResult
			call(t, te.handler, VerbFilter, namesArgs(tc.pod, names...), &r)
			want := maps.Clone(tc.want)
			want["ghost"] = tc.ghostByName
			if got := filterOutcome(t, &r); !maps.Equal(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
			if r.Nodes != nil || r.NodeNames == nil {
				t.Errorf("answer must carry NodeNames only: %+v", r)
			}
			// Feasible nodes keep the request's order.
			if !isSubsequence(*r.NodeNames, names) {
				t.Errorf("feasible nodes %v out of the request's order %v", *r.NodeNames, names)
			}
		})
		t.Run(tc.name+"/Node objects", func(t *testing.T) {
			objects := append(slices.Clone(nodes), ghost)
			var r extenderv1.ExtenderFilterResult
			call(t, te.handler, VerbFilter, nodesArgs(tc.pod, objects...), &r)
			want := maps.Clone(tc.want)
			want["ghost"] = tc.ghostObject
			if got := filterOutcome(t, &r); !maps.Equal(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
			if r.NodeNames != nil || r.Nodes == nil {
				t.Errorf("answer must carry Nodes only: %+v", r)
			}
			// Feasible nodes are the request's objects, in its order.
			var returned, requested []string
			for i := range r.Nodes.Items {
				n := &r.Nodes.Items[i]
				returned = append(returned, n.Name)
				if i := slices.IndexFunc(objects, func(o *v1.Node) bool { return o.Name == n.Name }); i < 0 || !equality.Semantic.DeepEqual(objects[i], n) {
					t.Errorf("node %s is not the request's object", n.Name)
				}
			}
			for _, o := range objects {
				requested = append(requested, o.Name)
			}
			if !isSubsequence(returned, requested) {
				t.Errorf("feasible nodes %v out of the request's order %v", returned, requested)
			}
		})
	}
}

// TestFilterPlacesGangPods: with PlaceGangPods (--pod-groups=place, for a
// scheduler with a gang plugin of its own) a gang pod is filtered as any
// pod: two whole GPUs fit a100-0 (GPUs 3-7 idle) and not a100-full (both
// taken).
func TestFilterPlacesGangPods(t *testing.T) {
	nodes, pods := filterNodes()
	te := newTestExtender(t, nil, nodes, pods)
	te.ext.PlaceGangPods(true)
	var r extenderv1.ExtenderFilterResult
	pod := gt.MakeGPUPod("p").GPUs(2).Label(podgroup.LabelPodGroup, "train").Obj()
	call(t, te.handler, VerbFilter, namesArgs(pod, "a100-0", "a100-full"), &r)
	want := map[string]string{"a100-0": "fits", "a100-full": "R: insufficient free GPUs"}
	if got := filterOutcome(t, &r); !maps.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// isSubsequence reports whether sub is s with elements left out.
func isSubsequence(sub, s []string) bool {
	for _, x := range s {
		if len(sub) > 0 && sub[0] == x {
			sub = sub[1:]
		}
	}
	return len(sub) == 0
}

func TestPrioritize(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("n-a").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("n-b").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("n-c").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("cpu-0").Obj(),
	}
	pods := []*v1.Pod{
		bound("a-w", "n-a", []int{0, 1}, 1000, 0), // n-a: 2 of 8 GPUs taken
		bound("c-w", "n-c", []int{0}, 1000, 0),    // n-c: 1 of 4
	}
	bestFit := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	spread := gpu.MustPolicy(gpu.PolicySpread, gpu.PolicyConfig{})
	bestFitMem := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{Weights: gpu.Weights{GPU: 1, Memory: 1}})
	extenders := map[string]*testExtender{
		"BestFit":        newTestExtender(t, bestFit, nodes, pods),
		"Spread":         newTestExtender(t, spread, nodes, pods),
		"BestFitGPU+Mem": newTestExtender(t, bestFitMem, nodes, pods),
	}
	whole1 := gt.MakeGPUPod("p").GPUs(1).Obj()
	for _, tc := range []struct {
		name   string
		policy string
		pod    *v1.Pod
		nodes  []string
		want   map[string]int64
	}{{
		// Engine scores, allocated fraction after placing: n-a 3/8 = 375000,
		// n-b 1/8 = 125000, n-c 2/4 = 500000. Min-max to 0..10:
		// n-a (375000-125000)*10/375000 = 6.67 -> 6, n-b 0, n-c 10.
		name: "BestFit, one GPU", policy: "BestFit", pod: whole1,
		nodes: []string{"n-a", "n-b", "n-c"},
		want:  map[string]int64{"n-a": 6, "n-b": 0, "n-c": 10},
	}, {
		// cpu-0 no longer fits: engine score 0, and like the plugin's
		// NormalizeScore it takes part in the min-max: lo = 0, hi = 500000:
		// n-a 375000*10/500000 = 7.5 -> 7, n-b 2.5 -> 2, n-c 10, cpu-0 0.
		name: "a node that no longer fits scores 0 and counts in the min-max", policy: "BestFit", pod: whole1,
		nodes: []string{"n-a", "n-b", "n-c", "cpu-0"},
		want:  map[string]int64{"n-a": 7, "n-b": 2, "n-c": 10, "cpu-0": 0},
	}, {
		// An unknown node scores 0 and is left out of the min-max.
		name: "an unknown node scores 0", policy: "BestFit", pod: whole1,
		nodes: []string{"n-a", "ghost", "n-b", "n-c"},
		want:  map[string]int64{"n-a": 6, "ghost": 0, "n-b": 0, "n-c": 10},
	}, {
		// Spread = 1000000 - BestFit: n-a 625000, n-b 875000, n-c 500000;
		// n-a (625000-500000)*10/375000 = 3.33 -> 3, n-b 10, n-c 0.
		name: "Spread, one GPU", policy: "Spread", pod: whole1,
		nodes: []string{"n-a", "n-b", "n-c"},
		want:  map[string]int64{"n-a": 3, "n-b": 10, "n-c": 0},
	}, {
		// A 250-milli share: n-a (2000+250)/8000 = 281250, n-b 250/8000 =
		// 31250, n-c (1000+250)/4000 = 312500; n-a 250000*10/281250 = 8.9 -> 8.
		name: "BestFit, a share", policy: "BestFit", pod: gt.MakeGPUPod("p").Milli(250).Obj(),
		nodes: []string{"n-a", "n-b", "n-c"},
		want:  map[string]int64{"n-a": 8, "n-b": 0, "n-c": 10},
	}, {
		// GPU and memory weighted 1:1, a 250-milli 8 GiB share. n-a: compute
		// 2250/8000 = .28125, memory (2*81920 + 8192)/655360 = .2625, mean
		// 271875; n-b: (.03125 + 8192/655360)/2 = 21875; n-c: compute
		// 1250/4000 = .3125, memory (15360 + 8192)/61440 = .38333, mean
		// 347916. n-a 250000*10/326041 = 7.7 -> 7.
		name: "BestFit on GPU and memory, a share", policy: "BestFitGPU+Mem",
		pod:   gt.MakeGPUPod("p").Milli(250).GPUMemory("8Gi").Obj(),
		nodes: []string{"n-a", "n-b", "n-c"},
		want:  map[string]int64{"n-a": 7, "n-b": 0, "n-c": 10},
	}, {
		name: "equal engine scores all get 10", policy: "BestFit", pod: whole1,
		nodes: []string{"n-b"},
		want:  map[string]int64{"n-b": 10},
	}, {
		name: "no GPU demand: 0 everywhere, the scheduler's scores decide", policy: "BestFit", pod: gt.MakeGPUPod("p").CPU("1").Obj(),
		nodes: []string{"n-a", "n-b", "n-c", "cpu-0"},
		want:  map[string]int64{"n-a": 0, "n-b": 0, "n-c": 0, "cpu-0": 0},
	}, {
		name: "malformed demand: 0 everywhere", policy: "BestFit", pod: gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "0").Obj(),
		nodes: []string{"n-a", "n-b"},
		want:  map[string]int64{"n-a": 0, "n-b": 0},
	}} {
		te := extenders[tc.policy]
		check := func(t *testing.T, got extenderv1.HostPriorityList) {
			if len(got) != len(tc.nodes) {
				t.Fatalf("got %d scores for %d nodes: %v", len(got), len(tc.nodes), got)
			}
			for i, hp := range got {
				if hp.Host != tc.nodes[i] || hp.Score != tc.want[hp.Host] {
					t.Errorf("score %d: %s=%d, want %s=%d", i, hp.Host, hp.Score, tc.nodes[i], tc.want[tc.nodes[i]])
				}
			}
		}
		t.Run(tc.name+"/nodeCacheCapable", func(t *testing.T) {
			var got extenderv1.HostPriorityList
			call(t, te.handler, VerbPrioritize, namesArgs(tc.pod, tc.nodes...), &got)
			check(t, got)
		})
		if slices.Contains(tc.nodes, "ghost") {
			continue // as an object, ghost would be known
		}
		t.Run(tc.name+"/Node objects", func(t *testing.T) {
			var objects []*v1.Node
			for _, name := range tc.nodes {
				objects = append(objects, nodes[slices.IndexFunc(nodes, func(n *v1.Node) bool { return n.Name == name })])
			}
			var got extenderv1.HostPriorityList
			call(t, te.handler, VerbPrioritize, nodesArgs(tc.pod, objects...), &got)
			check(t, got)
		})
	}
}

// TestPrioritizeCPUOnlyPod: a pod without GPUs is scored as the plugin
// scores it. PairFit weighs the node's CPU, keeping a GPU node's CPU for
// the GPU pods that need it, so it prefers the node without GPUs; BestFit
// weighs GPUs only and leaves the pod to the scheduler's own scores (0
// everywhere).
func TestPrioritizeCPUOnlyPod(t *testing.T) {
	nodes := []*v1.Node{gt.MakeGPUNode("gpu-0").GFD(a100, 8, 81920).CPU("64").Obj(), gt.MakeGPUNode("cpu-0").CPU("64").Obj()}
	pod := gt.MakeGPUPod("web").CPU("8").Obj()
	args := &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{"gpu-0", "cpu-0"}}
	for _, tc := range []struct {
		policy    gpu.PolicyType
		preferCPU bool // cpu-0 scores above gpu-0; else both 0
	}{
		{gpu.PolicyPairFit, true},
		{gpu.PolicyBestFit, false},
	} {
		opts := NewOptions() // the extender's own defaults for the policy
		opts.Policy = string(tc.policy)
		policy, err := opts.NewPolicy()
		if err != nil {
			t.Fatal(err)
		}
		te := newTestExtender(t, policy, nodes, nil)
		scores := map[string]int64{}
		for _, hp := range te.ext.Prioritize(te.ctx, args) {
			scores[hp.Host] = hp.Score
		}
		if got := scores["cpu-0"] > scores["gpu-0"]; got != tc.preferCPU || (!tc.preferCPU && scores["cpu-0"]+scores["gpu-0"] != 0) {
			t.Errorf("%s: scores %v, want cpu-0 above gpu-0: %v (else all 0)", tc.policy, scores, tc.preferCPU)
		}
	}
}
