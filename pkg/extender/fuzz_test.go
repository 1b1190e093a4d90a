package extender

import (
	"encoding/json"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// fuzzBodyLimit keeps 413 within the fuzzer's reach.
const fuzzBodyLimit = 4096

// FuzzFilterRequest: any bytes posted to /filter get 200, 400 or 413, never
// a panic; a 200 answer accounts for every requested node exactly once
// (feasible, failed or failed-and-unresolvable).
// Seed corpus: testdata/fuzz/FuzzFilterRequest.
func FuzzFilterRequest(f *testing.F) {
	nodes, pods := filterNodes()
	te := newTestExtender(f, nil, nodes, pods)
	h := NewHandler(te.ext, fuzzBodyLimit, nil)

	seed := func(args any) {
		raw, err := json.Marshal(args)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	seed(namesArgs(gt.MakeGPUPod("p").GPUs(2).Obj(), "a100-0", "t4-0", "cpu-0", "ghost"))
	seed(namesArgs(gt.MakeGPUPod("p").Milli(250).GPUMemory("10Gi").Models(a100).Obj(), "a100-0", "a100-full", "mixed-0"))
	seed(namesArgs(gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "half").Obj(), "a100-0"))
	seed(nodesArgs(gt.MakeGPUPod("p").GPUs(1).Models(t4).Obj(), gt.MakeGPUNode("x").GFD(t4, 2, 15360).Obj()))
	seed(nodesArgs(gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUNode("y").Annotation(gpu.AnnotationDevices, `[{"index":0}]`).Obj()))
	f.Add([]byte(`{"Pod": {"metadata": {"annotations": {"gpusched.io/gpu-milli": "1"}}}, "NodeNames": ["a100-0", "a100-0"]}`))
	f.Add([]byte(`{"Pod": {}, "Nodes": {"items": [{}]}}`))
	f.Add([]byte(`{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1e3"}}}]}}, "NodeNames": []}`))
	f.Add([]byte(`{"Pod": {`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{} {}`))

	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(t, h, VerbFilter, body)
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return
		case http.StatusOK:
		default:
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			t.Fatalf("200 for a body that does not decode: %v", err)
		}
		var r extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("answer does not decode: %v", err)
		}
		requested := map[string]int{}
		for name := range nodeNames(&args) {
			requested[name]++
		}
		answered := map[string]int{}
		if r.NodeNames != nil {
			for _, n := range *r.NodeNames {
				answered[n]++
			}
		}
		if r.Nodes != nil {
			for i := range r.Nodes.Items {
				answered[r.Nodes.Items[i].Name]++
			}
		}
		for n := range r.FailedNodes {
			answered[n] += requested[n]
		}
		for n := range r.FailedAndUnresolvableNodes {
			answered[n] += requested[n]
		}
		for n, count := range requested {
			if answered[n] != count {
				t.Fatalf("node %q requested %d times, answered %d times: %s", n, count, answered[n], rec.Body)
			}
		}
	})
}

// FuzzDecodeArgs: whatever the fast decoder of filter and prioritize
// requests accepts, encoding/json accepts too and decodes to the same value.
// (What it declines goes to encoding/json.)
// Seed corpus: testdata/fuzz/FuzzDecodeArgs.
func FuzzDecodeArgs(f *testing.F) {
	for _, args := range []*extenderv1.ExtenderArgs{
		namesArgs(gt.MakeGPUPod("p").GPUs(2).Models(a100, t4).Obj(), "a100-0", "t4-0"),
		namesArgs(gt.MakeGPUPod("p").Milli(250).GPUMemory("10Gi").Obj()),
		nodesArgs(gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUNode("x").GFD(t4, 2, 15360).Obj()),
		{Pod: gt.MakeGPUPod("p").Obj()},
	} {
		raw, err := json.Marshal(args)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, s := range []string{
		`{"Pod": {"metadata": {"name": "a\"}{]["}}, "NodeNames": ["n1", "n2"]}`,
		`{"Pod": {"metadata": {"name": "\\"}}, "NodeNames": []}`,
		`{"pod": {}, "NodeNames": ["n"]}`,
		`{"Pod": {}, "Pod": {"metadata": {"name": "x"}}, "NodeNames": null}`,
		`{"NodeNames": ["\u0061", "b"], "Pod": null}`,
		`{"NodeNames": ["a",], "Pod": {}}`,
		`{"Pod": 5, "NodeNames": []}`,
		`{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n"}}]}}`,
		` {"Pod":{}} `,
		`{"Pod": {}} x`,
		`{}`,
		`{"Pod": [}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast extenderv1.ExtenderArgs
		if !decodeArgsFast(data, &fast) {
			return
		}
		var std extenderv1.ExtenderArgs
		if _, err := decode(data, &std); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects: %v", err)
		}
		if !equality.Semantic.DeepEqual(fast, std) {
			t.Fatalf("fast path decoded\n%+v\nencoding/json\n%+v", fast, std)
		}
	})
}
