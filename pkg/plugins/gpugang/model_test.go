package gpugang

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	t4   = "Tesla-T4"
)

// TestOneModelFilter: a gang pod with GPU models decided by PreFilter passes
// nodes with a GPU of one of them, and nodes whose GPUs the Node object does
// not describe; other nodes are UnschedulableAndUnresolvable with
// ReasonOtherModel and the models.
func TestOneModelFilter(t *testing.T) {
	tests := []struct {
		name   string
		models []string // the gang's, as PreFilter left them; nil for any
		node   *v1.Node
		code   fwk.Code
		reason string
	}{
		{"node of the gang's model", []string{a100}, gt.MakeGPUNode("a").GFD(a100, 8, 81920).Obj(), fwk.Success, ""},
		{"model in another case", []string{"nvidia-a100-sxm4-80gb"}, gt.MakeGPUNode("a").GFD(a100, 8, 81920).Obj(), fwk.Success, ""},
		{"node of another model", []string{a100}, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), fwk.UnschedulableAndUnresolvable,
			"node's GPU model is not the gang's (NVIDIA-A100-SXM4-80GB)"},
		{"two models allowed", []string{a100, t4}, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), fwk.Success, ""},
		{"any model", nil, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), fwk.Success, ""},
		{"GPUs not on the Node object", []string{a100}, gt.MakeGPUNode("dra").Obj(), fwk.Success, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := framework.NewCycleState()
			state.Write(stateKey, &gangState{key: "default/g", minMember: 2, models: tt.models})
			ni := framework.NewNodeInfo()
			ni.SetNode(tt.node)
			status := (&GPUGang{ledger: gpu.NewLedger()}).Filter(context.Background(), state, gt.MakeGPUPod("p").GPUs(4).Obj(), ni)
			if status.Code() != tt.code || status.Message() != tt.reason {
				t.Errorf("got %v %q, want %v %q", status.Code(), status.Message(), tt.code, tt.reason)
			}
		})
	}
	// A pod outside any gang (no state from PreFilter) is never filtered.
	ni := framework.NewNodeInfo()
	ni.SetNode(gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj())
	if s := (&GPUGang{ledger: gpu.NewLedger()}).Filter(context.Background(), framework.NewCycleState(), gt.MakeGPUPod("p").GPUs(4).Obj(), ni); !s.IsSuccess() {
		t.Errorf("pod outside a gang: %v", s)
	}
}
