package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/internal/kubectlplugin"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/whatif"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestExplainAgainstTheAPIServer runs kubectl gpusched on a crafted cluster,
// with the gpusched scheduler (gang plugin included) trying the same pods:
// each kind of answer is asserted on the command's output.
func TestExplainAgainstTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)

	for _, n := range []*v1.Node{
		gt.MakeGPUNode("a").GFD(a100, 1, 40960).Obj(),
		gt.MakeGPUNode("t").GFD(t4, 4, 16384).Obj(),
		gt.MakeGPUNode("h1").GFD(h100, 8, 81920).Clique("c1").Obj(),
		gt.MakeGPUNode("h2").GFD(h100, 8, 81920).Clique("c2").Obj(),
	} {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 10}
	if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPriorityClass(ctx, t, c, "high")
	// Holders, bound as a scheduler would have bound them. GPU 0 of "a":
	// 300 + 300 milli-GPU and 16 + 16 GiB held; 400 milli and 8 GiB free.
	shareOn := func(name string, memoryMiB int64, class string) *v1.Pod {
		a := gpu.Assignment{Node: "a", Devices: []int{0}, Milli: 300, MemoryMiB: memoryMiB}
		p := gt.MakeGPUPod(name).Milli(300).GPUMemory("16Gi").Node("a").Assigned(a).Obj()
		p.Spec.PriorityClassName = class
		return p
	}
	wholeOn := func(name, node string, devices ...int) *v1.Pod {
		a := gpu.Assignment{Node: node, Devices: devices, Milli: gpu.MilliPerGPU}
		return gt.MakeGPUPod(name).GPUs(len(devices)).Node(node).Assigned(a).Obj()
	}
	for _, p := range []*v1.Pod{
		shareOn("x", 16384, ""), shareOn("y", 16384, "high"),
		wholeOn("big", "h1", 0, 1, 2, 3, 4, 5), wholeOn("small", "h2", 0, 1),
	} {
		createPod(ctx, t, c, p)
	}

	startGangSched(ctx, t, c, exampleGangConfig(t))
	createPodGroup(ctx, t, dyn, "train", 3, 600)
	pending := []*v1.Pod{
		gt.MakeGPUPod("mem").Milli(300).GPUMemory("14Gi").Models(a100).Obj(),
		gt.MakeGPUPod("h200").GPUs(1).Models("NVIDIA-H200").Obj(),
	}
	for i := range 3 {
		m := gangPod("train-"+string(rune('0'+i)), "train", 4)
		m.Annotations = map[string]string{gpu.AnnotationModels: h100}
		pending = append(pending, m)
	}
	for _, p := range pending {
		createPod(ctx, t, c, p)
	}
	for _, name := range []string{"mem", "h200"} {
		testcluster.WaitForPodEvent(ctx, t, c.Client, "default", name, "FailedScheduling", timeout)
	}

	run := func(t *testing.T, args ...string) string { return kubectlGPUSched(ctx, t, c, args...) }
	expect := expectOutput

	t.Run("memory held by named pods", func(t *testing.T) {
		// 14 GiB asked, 8 free: 6 GiB short. x (priority 0) frees 16 GiB
		// alone; y has priority 10.
		expect(t, run(t, "explain", "mem"),
			"Verdict: nothing fits now; nearest: fits on a GPU 0 if 6 GiB are freed — held by pod default/x (priority 0)",
			"Scheduler's last attempt: 0/4 nodes are available",
			gpu.ReasonInsufficientMemory.String())
	})
	t.Run("model mismatch", func(t *testing.T) {
		expect(t, run(t, "explain", "h200"),
			"Verdict: fits nowhere in this cluster: no GPU model matches [NVIDIA-H200] (the cluster has 1× "+a100+", 16× "+h100+", 4× "+t4+")",
			gpu.ReasonModelNotAllowed.String())
	})
	t.Run("gang short of a clique", func(t *testing.T) {
		// Three members of 4 H100s: h2 has 6 free (one member), h1 has 2.
		// 12 GPUs needed; c2 has 6: 6 more must be freed there.
		out := run(t, "explain", "train-0")
		expect(t, out, "Verdict: its gang default/train cannot run yet: 1 of the 3 pods it still needs fit now",
			"Gang default/train (minMember 3): 0 bound, 3 pending, 1 of them fit now together",
			"it needs 4 suitable free GPUs on one node, and the most left on one node is 2",
			"no clique holds it: the best, c2, has 6 suitable free GPUs of the 12 the gang needs; it fits in one clique if 6 more are freed there")
	})
	t.Run("fits nowhere as a gang", func(t *testing.T) {
		// Five members of 4 H100s: the 16 H100s hold four even when all
		// are free.
		createPodGroup(ctx, t, dyn, "huge", 5, 600)
		for i := range 5 {
			m := gangPod("huge-"+string(rune('0'+i)), "huge", 4)
			m.Annotations = map[string]string{gpu.AnnotationModels: h100}
			createPod(ctx, t, c, m)
		}
		expect(t, run(t, "explain", "huge-0"), "Verdict: its gang default/huge cannot run yet: fits nowhere in this cluster: gang needs 5 pods placed together but even with every GPU free only 4 fit")
	})
	t.Run("nodes and gpus", func(t *testing.T) {
		var got struct {
			Cluster struct {
				GPUCount       int   `json:"gpuCount"`
				AllocatedMilli int64 `json:"allocatedMilli"`
				PendingGPUPods int   `json:"pendingGPUPods"`
			} `json:"cluster"`
			Nodes []struct {
				Name string `json:"name"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(run(t, "nodes", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		// 1 + 4 + 8 + 8 GPUs; 300 + 300 + 6000 + 2000 milli held.
		if got.Cluster.GPUCount != 21 || got.Cluster.AllocatedMilli != 8600 || len(got.Nodes) != 4 {
			t.Errorf("cluster = %+v with %d nodes, want 21 GPUs, 8600 milli allocated, 4 nodes", got.Cluster, len(got.Nodes))
		}
		// Every pod not bound asks for GPUs: mem, h200, train-0..2 and, after
		// the subtest before, huge-0..4.
		all, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
		if err != nil {
			t.Fatal(err)
		}
		if got.Cluster.PendingGPUPods != len(all.Items) || len(all.Items) < 5 {
			t.Errorf("pending GPU pods = %d, want the %d pods not bound", got.Cluster.PendingGPUPods, len(all.Items))
		}
		expect(t, run(t, "gpus", "--node", "a"), "default/x 300m, default/y 300m")
		// 8600 of 21000 milli allocated: 41.0%.
		expect(t, run(t, "nodes"), "Cluster: 4 nodes, 21 GPUs; allocated 41.0%")
	})
	t.Run("what-if", func(t *testing.T) {
		// Two pods of 8 H100s: no node has 8 free (h1 2, h2 6); a copy of
		// h2 with nothing on it takes one, and the second fits nowhere.
		file := filepath.Join(t.TempDir(), "pods.yaml")
		pod := gt.MakeGPUPod("train").GPUs(8).Models(h100).Obj()
		pod.UID, pod.Kind, pod.APIVersion = "", "Pod", "v1"
		data, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var results []whatif.Result
		out := run(t, "what-if", "--pods", file, "--count", "2", "--add-like", "h2=1", "--policies", "BestFit,default", "-o", "json")
		if err := json.Unmarshal([]byte(out), &results); err != nil {
			t.Fatal(err)
		}
		if len(results) != 2 {
			t.Fatalf("results for %d policies, want 2", len(results))
		}
		for _, r := range results {
			p := r.Placements
			if len(p) != 2 || p[0].Node != "h2-whatif-1" || len(p[0].GPUs) != 8 || p[1].Placed() ||
				!strings.Contains(p[1].Reason, "0/5 nodes are available") {
				t.Errorf("%s: placements = %+v, want train-0 on h2-whatif-1 with 8 GPUs and train-1 nowhere", r.Policy, p)
			}
		}
		expect(t, run(t, "what-if", "--pods", file, "--policies", "BestFit"), "train", "0/4 nodes are available")
	})
	t.Run("bad input", func(t *testing.T) {
		var out bytes.Buffer
		cmd := kubectlplugin.NewCommand(ctx, &out)
		cmd.SetArgs([]string{"--kubeconfig", c.KubeconfigPath, "nodes", "-o", "yaml"})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--output: "yaml" is not a format: want text or json`) {
			t.Errorf("err = %v, want the --output error", err)
		}
	})
}

// kubectlGPUSched runs kubectl gpusched with args against the cluster, in
// namespace default, and returns its output; an error fails the test.
func kubectlGPUSched(ctx context.Context, t *testing.T, c *testcluster.Cluster, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := kubectlplugin.NewCommand(ctx, &out)
	cmd.SetArgs(append([]string{"--kubeconfig", c.KubeconfigPath, "-n", "default"}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("kubectl gpusched %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("kubectl gpusched %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// expectOutput fails the test for each of wants that out lacks.
func expectOutput(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
