package playground

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/trace"
)

// traceNodeList is the Alibaba trace's 1213-node GPU cluster, in the shared
// directory beside the repository (never committed).
var traceNodeList = filepath.Join("..", "..", "..", "shared", "traces", "alibaba-gpu-2023", "openb_node_list_gpu_node.csv")

func TestListNode(t *testing.T) {
	exported := func(mutate func(n *v1.Node)) *v1.Node {
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "gpu-7",
				Labels:      map[string]string{"team": "ml", gpu.LabelProduct: "NVIDIA-L4", gpu.LabelCount: "4", gpu.LabelMemory: "23034"},
				Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			},
			Spec: v1.NodeSpec{Taints: []v1.Taint{
				{Key: "nvidia.com/gpu", Effect: v1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute},
			}},
			Status: v1.NodeStatus{Allocatable: v1.ResourceList{
				v1.ResourceCPU: resource.MustParse("47500m"), v1.ResourceMemory: resource.MustParse("180Gi"),
				v1.ResourcePods: resource.MustParse("58"), gpu.ResourceGPU: resource.MustParse("4"),
			}},
		}
		if mutate != nil {
			mutate(n)
		}
		return n
	}
	for _, tc := range []struct {
		name      string
		in        *v1.Node
		model     string // published model (nvidia.com/gpu.product)
		gpus      int
		memoryMiB int64
		cpu, pods string
		taints    int
	}{
		{"trace V100M32", trace.NewNode("openb-node-0229", 96000, 786432, 8, "V100M32"), "V100M32", 8, 32768, "96", "1k", 0},
		{"trace T4", trace.NewNode("t", 64000, 262144, 2, "T4"), "T4", 2, 16384, "64", "1k", 0},
		{"trace G2, assumed 32 GB", trace.NewNode("g", 96000, 393216, 8, "G2"), "G2", 8, 32768, "96", "1k", 0},
		{"trace model, any case", trace.NewNode("p", 1000, 1024, 1, "p100"), "p100", 1, 16384, "1", "1k", 0},
		{"trace CPU-only node", trace.NewNode("c", 32000, 131072, 0, ""), "", 0, 0, "32", "1k", 0},
		{"export with memory label", exported(nil), "NVIDIA-L4", 4, 23034, "47500m", "58", 1},
		{"export, memory from -<N>GB", exported(func(n *v1.Node) {
			delete(n.Labels, gpu.LabelMemory)
			n.Labels[gpu.LabelProduct] = "NVIDIA-A100-SXM4-80GB"
		}), "NVIDIA-A100-SXM4-80GB", 4, 81920, "47500m", "58", 1},
		{"export, catalog mock", exported(func(n *v1.Node) { n.Labels[gpu.LabelProduct] = "H100-80GB" }), "NVIDIA-H100-80GB-HBM3", 4, 81920, "47500m", "58", 1},
		{"export, capacity only, no pods", exported(func(n *v1.Node) {
			n.Status.Capacity, n.Status.Allocatable = n.Status.Allocatable, nil
			delete(n.Status.Capacity, v1.ResourcePods)
		}), "NVIDIA-L4", 4, 23034, "47500m", "110", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ListNode(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			n := l.Node
			if l.GPUs.GPUs != tc.gpus || l.GPUs.MemoryMiB != tc.memoryMiB {
				t.Errorf("GPUs %+v, want %d of %d MiB", l.GPUs, tc.gpus, tc.memoryMiB)
			}
			if n.Name != tc.in.Name || n.Labels[v1.LabelHostname] != tc.in.Name || n.Annotations[KwokNodeAnnotation] != "fake" || len(n.Annotations) != 1 {
				t.Errorf("name %q, labels %v, annotations %v", n.Name, n.Labels, n.Annotations)
			}
			cpu, pods := n.Status.Allocatable[v1.ResourceCPU], n.Status.Allocatable[v1.ResourcePods]
			if cpu.String() != tc.cpu || pods.String() != tc.pods {
				t.Errorf("cpu %s pods %s, want %s and %s", cpu.String(), pods.String(), tc.cpu, tc.pods)
			}
			if len(n.Spec.Taints) != tc.taints {
				t.Errorf("taints %v, want %d (node.kubernetes.io/ ones dropped)", n.Spec.Taints, tc.taints)
			}
			inv, err := gpu.InventoryFromNode(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != tc.gpus {
				t.Fatalf("the scheduler reads %d GPUs, want %d", len(inv.Devices), tc.gpus)
			}
			for _, d := range inv.Devices {
				if d.Model != tc.model || d.MemoryMiB != tc.memoryMiB {
					t.Errorf("device %+v, want model %q, %d MiB", d, tc.model, tc.memoryMiB)
				}
			}
			if tc.gpus > 0 && l.GPUs.GPUModel() != tc.model {
				t.Errorf("the agent publishes %q, the labels say %q", l.GPUs.GPUModel(), tc.model)
			}
		})
	}
}

func TestListNodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *v1.Node
		want string
	}{
		{"unknown model", trace.NewNode("n", 1000, 1024, 2, "X9"), `GPU model "X9": its memory per GPU is unknown; want a nvidia.com/gpu.memory label (MiB), a model of the trace (A10, G1, G2, G3, P100, T4, V100M16, V100M32), or a model ending in -<N>GB`},
		{"GPUs without a model", trace.NewNode("n", 1000, 1024, 2, ""), "GPUs without a model: want the label nvidia.com/gpu.product"},
		{"negative CPU", trace.NewNode("n", -4000, 1024, 0, ""), "allocatable cpu -4: want a quantity of at least 0"},
		{"too many GPUs", trace.NewNode("n", 1000, 1024, 65, "T4"), "at most 64 GPUs per node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ListNode(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

// TestLoadNodeListErrors: a bad --nodes-from file stops the command with an
// error that names the file, where in it, the value and what is allowed.
func TestLoadNodeListErrors(t *testing.T) {
	dir := t.TempDir()
	header := "sn,cpu_milli,memory_mib,gpu,model\n"
	for _, tc := range []struct {
		file, content string
		want          *regexp.Regexp
	}{
		{"missing.csv", "", regexp.MustCompile(`invalid --nodes-from: open \S*missing.csv: no such file`)},
		{"negative-cpu.csv", header + "a,64000,1024,2,T4\nb,-1,1024,2,T4\n", regexp.MustCompile(`negative-cpu.csv:3:3: cpu_milli "-1": want an integer in 0\.\.`)},
		{"short-row.csv", header + "a,64000,1024,2,T4\nb,64000,1024\n", regexp.MustCompile(`short-row.csv:3:1: 3 fields: want 5`)},
		{"bad-quote.csv", header + "a,64000,\"1024,2,T4\n", regexp.MustCompile(`bad-quote.csv:2:\d+: .*quote`)},
		{"no-header.csv", "a,64000,1024,2,T4\n", regexp.MustCompile(`no-header.csv:1:1: header .* lacks column "sn"`)},
		{"unknown-model.csv", header + "a,64000,1024,2,T4\nb,64000,1024,8,X9\n", regexp.MustCompile(`unknown-model.csv:3: node "b": GPU model "X9": its memory per GPU is unknown; want`)},
		{"nodes.yaml", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n1}\n  status:\n    allocatable: {cpu: 4x}\n", regexp.MustCompile(`nodes.yaml:8:\d+: allocatable cpu "4x": want a quantity`)},
		{"negative.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  allocatable: {cpu: \"-2\", nvidia.com/gpu: \"1\"}\n", regexp.MustCompile(`negative.yaml: node "n1": allocatable cpu -2: want a quantity of at least 0`)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := LoadNodeList(path)
			if err == nil || !tc.want.MatchString(err.Error()) {
				t.Errorf("error %v, want one matching %q", err, tc.want)
			}
		})
	}
}

// TestNodesFromTrace serves the playground with --nodes-from the trace's
// node list and checks that all 1213 nodes are Ready, every one carries its
// agent's GPUs, and the scheduler places a pod on a model the trace names.
// It runs wherever the trace is; under CI=true it must be there.
func TestNodesFromTrace(t *testing.T) {
	if _, err := os.Stat(traceNodeList); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the trace's node list is missing: %v", err)
		}
		t.Skipf("the trace's node list is not here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	pg := serve(ctx, t, func(f *Flags) { f.NodesFrom = traceNodeList })
	out := pg.out
	t.Logf("up after %s:\n%s", time.Since(start).Round(10*time.Millisecond), out.String())
	for _, want := range []string{
		"1213 simulated nodes from " + traceNodeList + " (549xG2:8,387xT4:2,131xP100:2,39xG3:8,",
		"Node agents published 6212 GPUs",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	client := pg.client
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready, gpus := 0, 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				ready++
			}
		}
		if n.Annotations[gpu.AnnotationDevices] == "" {
			t.Errorf("node %s has no %s", n.Name, gpu.AnnotationDevices)
			continue
		}
		inv, err := gpu.InventoryFromNode(n)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		gpus += len(inv.Devices)
	}
	if len(nodes.Items) != 1213 || ready != 1213 || gpus != 6212 {
		t.Errorf("%d nodes, %d Ready, %d GPUs published; want 1213, 1213 and 6212", len(nodes.Items), ready, gpus)
	}

	pod := models(wholeGPUs(demoPod("v100"), 8), "V100M32")
	pod.Spec.SchedulerName = "gpusched"
	if _, err := client.CoreV1().Pods(DemoNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var placed *v1.Pod
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		placed, err = client.CoreV1().Pods(DemoNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && placed.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("the 8-GPU V100M32 pod was not placed: %v", err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, placed.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[gpu.LabelProduct] != "V100M32" || node.Labels[gpu.LabelCount] != "8" {
		t.Errorf("the 8-GPU V100M32 pod went to %s, labels %v", node.Name, node.Labels)
	}
}

// TestLoadNodeListYAML reads a `kubectl get nodes -o yaml` List: a GPU node
// with GPU Feature Discovery's labels and a node without GPUs.
func TestLoadNodeListYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	err := os.WriteFile(path, []byte(`apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-a
    labels: {nvidia.com/gpu.product: NVIDIA-L4, nvidia.com/gpu.memory: "23034", pool: inference}
  status:
    allocatable: {cpu: 31850m, memory: 120Gi, pods: "58", nvidia.com/gpu: "2"}
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-b}
  spec:
    taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
  status:
    capacity: {cpu: "4", memory: 16Gi}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	list, err := LoadNodeList(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d nodes, want 2", len(list))
	}
	a, b := list[0], list[1]
	if a.Node.Name != "gpu-a" || a.GPUs.GPUs != 2 || a.GPUs.Model != "NVIDIA-L4" || a.GPUs.MemoryMiB != 23034 || a.Node.Labels["pool"] != "inference" {
		t.Errorf("gpu-a: %+v, labels %v", a.GPUs, a.Node.Labels)
	}
	if b.Node.Name != "cpu-b" || b.GPUs.GPUs != 0 || len(b.Node.Spec.Taints) != 1 || b.Node.Labels[gpu.LabelCount] != "" {
		t.Errorf("cpu-b: %+v, labels %v, taints %v", b.GPUs, b.Node.Labels, b.Node.Spec.Taints)
	}
	if got := listString(list); got != "1xNVIDIA-L4:2,1 without GPUs" {
		t.Errorf("listString %q", got)
	}
}
