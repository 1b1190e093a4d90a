package extender

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestDecodeArgsFast: the fast path takes what the kube-scheduler sends and
// decodes it as encoding/json does; it declines everything else.
func TestDecodeArgsFast(t *testing.T) {
	names := []string{"gpu-node-00001", "gpu-node-00002", "n.example.com"}
	for _, tc := range []struct {
		name string
		body []byte
		take bool
	}{
		{"nodeCacheCapable request", marshal(t, namesArgs(gt.MakeGPUPod("p").GPUs(2).Models(a100, t4).Obj(), names...)), true},
		{"Node objects", marshal(t, nodesArgs(gt.MakeGPUPod("p").Milli(250).Obj(), gt.MakeGPUNode("n").GFD(t4, 4, 15360).Obj())), true},
		{"no nodes", marshal(t, namesArgs(gt.MakeGPUPod("p").Obj())), true},
		{"white space around everything", []byte(" {\n \"Pod\" : {} ,\t\"NodeNames\" : [ \"a\" , \"b\" ] }\r\n"), true},
		{"quotes and brackets inside the pod", []byte(`{"Pod": {"metadata": {"name": "a\"}]["}}, "NodeNames": ["n"]}`), true},
		{"a key in another case", []byte(`{"pod": {}, "NodeNames": ["n"]}`), false},
		{"a repeated key", []byte(`{"Pod": {}, "Pod": {}, "NodeNames": ["n"]}`), false},
		{"an unknown key", []byte(`{"Pod": {}, "NodeNames": ["n"], "Extra": 1}`), false},
		{"an escape in a node name", []byte(`{"Pod": {}, "NodeNames": ["\u0061"]}`), false},
		{"a non-ASCII node name", []byte(`{"Pod": {}, "NodeNames": ["nœud"]}`), false},
		{"a trailing comma", []byte(`{"Pod": {}, "NodeNames": ["a",]}`), false},
		{"data after the object", []byte(`{"Pod": {}, "NodeNames": []} {}`), false},
		{"a malformed pod", []byte(`{"Pod": {"metadata": 5}, "NodeNames": []}`), false},
		{"truncated", []byte(`{"Pod": {}, "NodeNames": ["a"`), false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fast extenderv1.ExtenderArgs
			took := decodeArgsFast(tc.body, &fast)
			if took != tc.take {
				t.Fatalf("fast path taken: %v, want %v", took, tc.take)
			}
			if !took {
				return
			}
			var std extenderv1.ExtenderArgs
			if _, err := decode(tc.body, &std); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(fast, std) {
				t.Errorf("fast %+v, encoding/json %+v", fast, std)
			}
		})
	}
}

// TestAppendMatchesEncodingJSON: the fast encoders write what encoding/json
// writes (byte for byte where map order cannot differ).
func TestAppendMatchesEncodingJSON(t *testing.T) {
	names := []string{"a100-0", "t4-0"}
	for _, r := range []*extenderv1.ExtenderFilterResult{
		{NodeNames: &names, FailedNodes: extenderv1.FailedNodesMap{"x": "insufficient free GPUs"}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}},
		{NodeNames: &[]string{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"n<&>": `invalid gpusched.io/gpu-milli "half": want…` + "\x01\xff"}},
		{Error: "boom"},
	} {
		if got, want := string(appendFilterResult(nil, r)), string(marshal(t, r)); got != want {
			t.Errorf("filter result\n got %s\nwant %s", got, want)
		}
	}
	for _, l := range []extenderv1.HostPriorityList{
		nil, {}, {{Host: "a100-0", Score: 10}, {Host: "t4-0", Score: 0}, {Host: "é\"", Score: -3}},
	} {
		if got, want := string(appendHostPriorities(nil, l)), string(marshal(t, l)); got != want {
			t.Errorf("priorities\n got %s\nwant %s", got, want)
		}
	}
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
