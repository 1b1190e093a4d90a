package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/whatif"
)

// export is what `kubectl get nodes,pods -A -o yaml` writes: a List. Node
// "a" has 4 A100s with GPUs 0 and 1 held by pod "held"; "b" has 2 A100s.
const export = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: a, labels: {nvidia.com/gpu.product: A100, nvidia.com/gpu.memory: "40960", nvidia.com/gpu.count: "4"}}
  status: {allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "4"}}
- apiVersion: v1
  kind: Node
  metadata: {name: b, labels: {nvidia.com/gpu.product: A100, nvidia.com/gpu.memory: "40960", nvidia.com/gpu.count: "2"}}
  status: {allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "2"}}
- apiVersion: v1
  kind: Pod
  metadata: {name: held, namespace: ml, annotations: {gpusched.io/gpu-assigned: "node=a;gpus=0,1"}}
  spec:
    nodeName: a
    containers: [{name: c, resources: {limits: {nvidia.com/gpu: "2"}}}]
- apiVersion: v1
  kind: Service
  metadata: {name: ignored}
`

const newPods = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "2"}}}]
`

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := NewCommand(context.Background(), &out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestWhatIfFromExport: the command reads an export and the pods, and
// answers what whatif.Run answers for the same objects.
func TestWhatIfFromExport(t *testing.T) {
	from, pods := writeFile(t, "export.yaml", export), writeFile(t, "pods.yaml", newPods)
	out, err := execute(t, "what-if", "--from", from, "--pods", pods, "--count", "3", "--add-like", "b=1", "--policies", "BestFit", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got []whatif.Result
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// Three 2-GPU pods: a has 2 free, b has 2, the copy of b has 2.
	if len(got) != 1 || got[0].Summary.Placed != 3 {
		t.Fatalf("results = %+v, want 3 pods placed", got)
	}
	nodes := map[string]bool{}
	for _, p := range got[0].Placements {
		nodes[p.Node] = true
	}
	for _, n := range []string{"a", "b", "b-whatif-1"} {
		if !nodes[n] {
			t.Errorf("no pod on %s: %+v", n, got[0].Placements)
		}
	}
	// The same question asked of the package directly.
	clusterNodes, clusterPods, err := readObjectFile(from)
	if err != nil {
		t.Fatal(err)
	}
	_, newOnes, _ := readObjectFile(pods)
	extra, err := copiesOf(clusterNodes, "b=1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := whatif.Run(whatif.Input{Nodes: clusterNodes, Pods: clusterPods, ExtraNodes: extra, NewPods: repeat(newOnes, 3)},
		whatif.Options{Policies: []string{"BestFit"}, Seed: whatif.DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want[0].Placements {
		w, g := want[0].Placements[i], got[0].Placements[i]
		if w.Pod != g.Pod || w.Node != g.Node || joinInts(w.GPUs) != joinInts(g.GPUs) {
			t.Errorf("pod %d: command %s on %s %v, package %s on %s %v", i, g.Pod, g.Node, g.GPUs, w.Pod, w.Node, w.GPUs)
		}
	}
	// The held GPUs stay held: the pod on a gets GPUs 2 and 3.
	for _, p := range got[0].Placements {
		if p.Node == "a" && joinInts(p.GPUs) != "2,3" {
			t.Errorf("pod on a got GPUs %v, want 2,3", p.GPUs)
		}
	}
}

// TestWhatIfBadInput: each malformed flag or file names what is wrong.
func TestWhatIfBadInput(t *testing.T) {
	from, pods := writeFile(t, "export.yaml", export), writeFile(t, "pods.yaml", newPods)
	broken := writeFile(t, "broken.yaml", "kind: Pod\nmetadata: {name: x}\nspec: {containers: 7}\n")
	nodesOnly := writeFile(t, "nodes.yaml", "kind: Node\nmetadata: {name: c}\n")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"what-if", "--from", from}, "--pods: no file given"},
		{[]string{"what-if", "--from", from, "--pods", pods, "--count", "0"}, "--count: 0 is not a count"},
		{[]string{"what-if", "--from", from, "--pods", pods, "--add-like", "b"}, `--add-like: "b" is not NODE=N`},
		{[]string{"what-if", "--from", from, "--pods", pods, "--add-like", "zz=2"}, `--add-like: "zz": no node of that name`},
		{[]string{"what-if", "--from", from, "--pods", broken}, `broken.yaml: document 1: Pod "x"`},
		{[]string{"what-if", "--from", from, "--pods", nodesOnly}, "holds no Pod"},
		{[]string{"what-if", "--from", from, "--pods", pods, "--policies", "Nope"}, `"Nope"`},
		{[]string{"what-if", "--from", from, "--pods", pods, "-o", "wide"}, `--output: "wide" is not a format`},
	}
	for _, tc := range cases {
		_, err := execute(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one containing %q", tc.args[3:], err, tc.want)
		}
	}
}

// TestWhatIfTextOutput: the table names each policy and each pod's node.
func TestWhatIfTextOutput(t *testing.T) {
	from, pods := writeFile(t, "export.yaml", export), writeFile(t, "pods.yaml", newPods)
	out, err := execute(t, "what-if", "--from", from, "--pods", pods, "--count", "3", "--policies", "BestFit")
	if err != nil {
		t.Fatal(err)
	}
	// Two of the three fit (a: 2 free, b: 2 free); capacity 6 GPUs, 2 held:
	// 33.3% allocated before, 100% after.
	summary := strings.Fields(strings.Split(out, "\n")[1])
	if strings.Join(summary, " ") != "BestFit 2 1 33.3% -> 100.0% 0.0% -> 0.0%" {
		t.Errorf("summary row = %q", summary)
	}
	for _, want := range []string{"default/p-2", "0/2 nodes are available"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
