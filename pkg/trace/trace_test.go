package trace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadNodesCSV(t *testing.T) {
	path := writeFile(t, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,16000,122880,0,\n")
	nodes, err := LoadNodes(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 {
		t.Fatalf("got %d nodes, want 2", len(nodes))
	}
	inv, err := gpu.InventoryFromNode(nodes[0])
	if err != nil || inv.Len() != 8 || inv.Devices[0].Model != "G2" {
		t.Errorf("n0 inventory = %+v, %v; want 8 G2 GPUs", inv, err)
	}
	if got := nodes[0].Status.Allocatable.Cpu().MilliValue(); got != 96000 {
		t.Errorf("n0 CPU = %d milli, want 96000", got)
	}
	if got := nodes[1].Status.Allocatable.Memory().Value(); got != 122880<<20 {
		t.Errorf("n1 memory = %d, want %d", got, 122880<<20)
	}
}

func TestLoadPodsCSV(t *testing.T) {
	full := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"p0,12000,16384,1,1000,,LS,Running,0,100,0\n" +
		"p1,6000,12288,1,460,V100M16|V100M32,LS,Running,10,,10\n" +
		"p2,4000,8192,0,0,,BE,Running,20,30,20\n" +
		"p3,8000,8192,4,1000,,LS,Running,20,30,20\n"
	pods, err := LoadPods(writeFile(t, "pods.csv", full))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		count            int
		milli            int64
		models           string
		created, deleted int64
	}{
		{1, 1000, "", 0, 100},
		{1, 460, "V100M16,V100M32", 10, NeverDeleted}, // still running at the end: no deletion time
		{0, 0, "", 20, 30},
		{4, 1000, "", 20, 30},
	}
	for i, w := range want {
		d, err := gpu.DemandFromPod(pods[i].Pod)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		if d.Count != w.count || (w.count > 0 && d.Milli != w.milli) || strings.Join(d.Models, ",") != w.models {
			t.Errorf("pod %d demand = %+v, want count %d milli %d models %q", i, d, w.count, w.milli, w.models)
		}
		if !pods[i].HasTimes || pods[i].Created != w.created || pods[i].Deleted != w.deleted {
			t.Errorf("pod %d times = %d..%d (has %v), want %d..%d", i, pods[i].Created, pods[i].Deleted, pods[i].HasTimes, w.created, w.deleted)
		}
	}

	// The multi-GPU files have only five columns, and no times.
	five, err := LoadPods(writeFile(t, "multigpu.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,2,1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := gpu.DemandFromPod(five[0].Pod); d.Count != 2 || five[0].HasTimes {
		t.Errorf("five-column pod: demand %+v, has times %v; want 2 GPUs and no times", d, five[0].HasTimes)
	}
}

// TestMalformedInputs: every malformed input names the file, line and column
// and what was expected there.
func TestMalformedInputs(t *testing.T) {
	const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	tests := []struct {
		name, file, content, want string
		nodes                     bool
	}{
		{name: "node cpu not a number", nodes: true, file: "n.csv",
			content: "sn,cpu_milli,memory_mib,gpu,model\nn0,lots,1,1,T4\n",
			want:    `n.csv:2:4: cpu_milli "lots": want an integer in 0..4294967296`},
		{name: "node missing column", nodes: true, file: "n.csv",
			content: "sn,cpu_milli,gpu,model\nn0,1,1,T4\n",
			want:    `n.csv:1:1: header "sn,cpu_milli,gpu,model" lacks column "memory_mib"`},
		{name: "node GPUs without model", nodes: true, file: "n.csv",
			content: "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n",
			want:    `n.csv:2:16: model "": want the GPU model of a node with GPUs`},
		{name: "duplicate node", nodes: true, file: "n.csv",
			content: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,\nn0,1,1,0,\n",
			want:    `n.csv:3:1: sn "n0": want a unique, non-empty node name`},
		{name: "too many GPUs", nodes: true, file: "n.csv",
			content: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,65,T4\n",
			want:    `n.csv:2:8: gpu "65": want an integer in 0..64`},
		{name: "short row", file: "p.csv", content: podHeader + "p0,1,1\n",
			want: `p.csv:2:1: 3 fields: want 5, one per header column`},
		{name: "unterminated quote", file: "p.csv", content: podHeader + "p0,\"1,1,1,1000\n",
			want: `p.csv:2:`},
		{name: "share of several GPUs", file: "p.csv", content: podHeader + "p0,1000,1024,2,500\n",
			want: `p.csv:2:16: gpu_milli "500": want 1000 for a pod with num_gpu 2: only single-GPU pods share a GPU`},
		{name: "GPU pod with no milli", file: "p.csv", content: podHeader + "p0,1000,1024,1,0\n",
			want: `p.csv:2:16: gpu_milli "0": want 1..1000 for a pod with num_gpu 1`},
		{name: "milli above a GPU", file: "p.csv", content: podHeader + "p0,1000,1024,1,1500\n",
			want: `p.csv:2:16: gpu_milli "1500": want an integer in 0..1000`},
		{name: "negative memory", file: "p.csv", content: podHeader + "p0,1000,-5,1,1000\n",
			want: `p.csv:2:9: memory_mib "-5": want an integer in 0..68719476736`},
		{name: "empty model in spec", file: "p.csv",
			content: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1,1,1,1000,T4||A10\n",
			want:    `p.csv:2:15: gpu_spec "T4||A10": want GPU models separated by '|', none empty`},
		{name: "deleted before created", file: "p.csv",
			content: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np0,1,1,0,0,50,40\n",
			want:    `p.csv:2:15: deletion_time "40": want a time no earlier than creation_time 50`},
		{name: "empty pod file", file: "p.csv", content: "",
			want: `p.csv: empty file: want a header row`},
		{name: "yaml wrong kind", file: "p.yaml", content: "apiVersion: v1\nkind: Node\nmetadata:\n  name: x\n",
			want: `p.yaml:1:1: want kind: Pod`},
		{name: "yaml bad quantity", file: "p.yaml", content: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        cpu: two\n",
			want: `p.yaml:10:14: requests cpu "two": want a quantity such as 500m, 2 or 4Gi`},
		{name: "yaml unknown field", file: "p.yaml", content: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containerz: []\n",
			want: `p.yaml:6:15: unknown field "spec.containerz" in a Pod`},
		{name: "yaml wrong type", file: "p.yaml", content: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: 3\n",
			want: `p.yaml:6:15: spec.containers: want a value of type []v1.Container, found number`},
		{name: "yaml syntax", file: "n.yaml", nodes: true, content: "kind: Node\nmetadata: [\n",
			want: `n.yaml:2: invalid YAML:`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file, tc.content)
			var err error
			if tc.nodes {
				_, err = LoadNodes(path)
			} else {
				_, err = LoadPods(path)
			}
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			got := strings.TrimPrefix(err.Error(), filepath.Dir(path)+string(filepath.Separator))
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("error\n  %s\nwant it to start with\n  %s", got, tc.want)
			}
		})
	}
}

func TestLoadYAML(t *testing.T) {
	nodes := "apiVersion: v1\nkind: List\nitems:\n" +
		"- apiVersion: v1\n  kind: Node\n  metadata:\n    name: a100-0\n    labels:\n      nvidia.com/gpu.product: A100\n      nvidia.com/gpu.count: \"4\"\n" +
		"  status:\n    allocatable:\n      cpu: \"64\"\n      memory: 512Gi\n      pods: \"110\"\n      nvidia.com/gpu: \"4\"\n"
	got, err := LoadNodes(writeFile(t, "nodes.yaml", nodes))
	if err != nil {
		t.Fatal(err)
	}
	if inv, err := gpu.InventoryFromNode(got[0]); err != nil || inv.Len() != 4 {
		t.Errorf("inventory = %v, %v; want 4 GPUs", inv, err)
	}
	pods := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  creationTimestamp: \"2026-01-01T00:00:10Z\"\n  annotations:\n    gpusched.io/gpu-milli: \"250\"\nspec:\n  containers:\n  - name: c\n---\n" +
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  deletionTimestamp: \"2026-01-01T00:01:00Z\"\nspec:\n  containers:\n  - name: c\n"
	ps, err := LoadPods(writeFile(t, "pods.yaml", pods))
	if err != nil {
		t.Fatal(err)
	}
	// b is the earliest: time 0, leaving at 60 s; a arrives at 10 s and stays.
	if ps[0].Created != 10 || ps[0].Deleted != NeverDeleted || ps[1].Created != 0 || ps[1].Deleted != 60 {
		t.Errorf("times: a %d..%d, b %d..%d; want a 10..end, b 0..60", ps[0].Created, ps[0].Deleted, ps[1].Created, ps[1].Deleted)
	}
	if d, _ := gpu.DemandFromPod(ps[0].Pod); d.Milli != 250 {
		t.Errorf("a's demand = %+v, want 250 milli-GPU", d)
	}
}
