package nri_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestNRIHandoff follows a decision from the engine to the container,
// without an API server: the agent publishes a mock DGX H100's GPUs, the
// engine reads that Node and places pods one after another (as the
// scheduler's Reserve and PreBind would), and each pod's container, created
// through the runtime's NRI, receives exactly the UUIDs of its assignment.
// Whole-GPU pods never share a GPU; two shares placed on one GPU both get it.
func TestNRIHandoff(t *testing.T) {
	const node = thisNode
	machine := nvmlmock.DGXH100()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	store := &discovery.Store{}
	pub := &discovery.Publisher{Lib: machine, Nodes: client.CoreV1().Nodes(), NodeName: node, Store: store, Health: discovery.NewHealth()}
	if _, err := pub.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	nodeObj, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	r := startRuntime(t)
	startAgent(t, r, agentnri.Config{NodeName: node, Mode: agentnri.ModeEnv}, store)

	policy, err := gpu.NewPolicy(gpu.DefaultPolicy, gpu.PolicyConfig{Shapes: gpu.NewShapeWindow(0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ledger := gpu.NewLedger()
	var bound []*v1.Pod
	pods := []*gt.PodWrapper{
		gt.MakeGPUPod("train-2").GPUs(2),
		gt.MakeGPUPod("train-4").GPUs(4),
		gt.MakeGPUPod("train-1").GPUs(1),
		gt.MakeGPUPod("infer-a").Milli(500),
		gt.MakeGPUPod("infer-b").Milli(500),
	}
	given := map[string][]string{}
	for gen, w := range pods {
		p := w.Obj()
		view := ledger.Node(nodeObj, int64(gen), slices.Values(bound))
		d, err := policy.Demand(p)
		if err != nil {
			t.Fatal(err)
		}
		chosen, fit := policy.Place(view, &gpu.Request{Demand: &d})
		if !fit.OK() {
			t.Fatalf("%s does not fit: %v", p.Name, fit.Reasons)
		}
		a := gpu.NewAssignment(view, &d, chosen)
		p = w.Node(node).Assigned(a).Obj()
		bound = append(bound, p)

		// The kubelet hands the pod's annotations to the runtime's sandbox.
		adj, err := r.create(pod(p.Namespace, p.Name, p.Annotations), container("ctr-"+p.Name, "NVIDIA_VISIBLE_DEVICES=all"))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		var visible string
		for _, kv := range adj.GetEnv() {
			if kv.GetKey() == "NVIDIA_VISIBLE_DEVICES" {
				visible = kv.GetValue()
			}
		}
		if got := strings.Split(visible, ","); !slices.Equal(got, a.UUIDs) || len(got) != d.Count {
			t.Fatalf("%s was assigned %v (%s) but its container sees %q", p.Name, a.UUIDs, a.String(), visible)
		}
		given[p.Name] = a.UUIDs
	}

	owner := map[string]string{}
	for _, name := range []string{"train-2", "train-4", "train-1"} {
		for _, u := range given[name] {
			if other, taken := owner[u]; taken {
				t.Fatalf("%s and %s both received whole GPU %s", other, name, u)
			}
			owner[u] = name
		}
	}
	if a, b := given["infer-a"], given["infer-b"]; !slices.Equal(a, b) {
		t.Fatalf("the two 500-milli shares got %v and %v; best-fit puts them on one GPU", a, b)
	}
	if other, taken := owner[given["infer-a"][0]]; taken {
		t.Fatalf("the shares received %s, which %s holds whole", given["infer-a"][0], other)
	}
}
