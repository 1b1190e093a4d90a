package gpugang

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	t4   = "Tesla-T4"
)

// TestOneModelFilter: a gang pod with GPU models decided by PreFilter passes
// nodes with a GPU of one of them, and nodes without GPUs; other nodes are
// UnschedulableAndUnresolvable with ReasonOtherModel and the models. A
// node's GPUs are the DRA driver's where it publishes them.
func TestOneModelFilter(t *testing.T) {
	draA100 := fakeDRA{"dra": gt.EmptyDRAView("dra", a100, 8)}
	tests := []struct {
		name   string
		models []string // the gang's, as PreFilter left them; nil for any
		node   *v1.Node
		dra    dragpus.GPUs // what GPUPlacement read of DRA; nil for none
		code   fwk.Code
		reason string
	}{
		{"node of the gang's model", []string{a100}, gt.MakeGPUNode("a").GFD(a100, 8, 81920).Obj(), nil, fwk.Success, ""},
		{"model in another case", []string{"nvidia-a100-sxm4-80gb"}, gt.MakeGPUNode("a").GFD(a100, 8, 81920).Obj(), nil, fwk.Success, ""},
		{"node of another model", []string{a100}, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), nil, fwk.UnschedulableAndUnresolvable,
			"node's GPU model is not the gang's (NVIDIA-A100-SXM4-80GB)"},
		{"two models allowed", []string{a100, t4}, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), nil, fwk.Success, ""},
		{"any model", nil, gt.MakeGPUNode("t").GFD(t4, 4, 15360).Obj(), nil, fwk.Success, ""},
		{"node without GPUs", []string{a100}, gt.MakeGPUNode("dra").Obj(), nil, fwk.Success, ""},
		{"DRA GPUs of the gang's model", []string{a100}, gt.MakeGPUNode("dra").Obj(), draA100, fwk.Success, ""},
		{"DRA GPUs of another model", []string{t4}, gt.MakeGPUNode("dra").Obj(), draA100, fwk.UnschedulableAndUnresolvable,
			"node's GPU model is not the gang's (Tesla-T4)"},
		// The DRA driver's GPUs are the node's, whatever its labels say.
		{"DRA GPUs on a node with GFD labels", []string{t4}, gt.MakeGPUNode("dra").GFD(t4, 4, 15360).Obj(), draA100, fwk.UnschedulableAndUnresolvable,
			"node's GPU model is not the gang's (Tesla-T4)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := framework.NewCycleState()
			state.Write(stateKey, &gangState{key: "default/g", minMember: 2, models: tt.models})
			if tt.dra != nil {
				state.Write(dragpus.StateKey, tt.dra)
			}
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

// fakeDRA is what GPUPlacement read of DRA in a cycle: the GPUs of some
// nodes (with nothing allocated) and what some pods' claims ask, by pod name.
type fakeDRA map[string]*gpu.NodeGPUs

func (f fakeDRA) Clone() fwk.StateData                    { return f }
func (f fakeDRA) NodeGPUs(node string) *gpu.NodeGPUs      { return f[node] }
func (f fakeDRA) EmptyNodeGPUs(node string) *gpu.NodeGPUs { return f[node] }
func (f fakeDRA) ClaimDemand(_ context.Context, pod *v1.Pod) (gpu.Demand, bool) {
	if pod.Annotations["test/claim-gpus"] == "" {
		return gpu.Demand{}, false
	}
	return gpu.Demand{Count: len(pod.Annotations["test/claim-gpus"]), Milli: gpu.MilliPerGPU}, true
}

// TestDemandOfClaimPods: a gang member's GPUs are its annotation's or
// extended resources', else what its claims ask; a claim pod counts as
// asking for none while its claims cannot be read, or without DRA GPUs.
func TestDemandOfClaimPods(t *testing.T) {
	withClaims := func(p *v1.Pod, gpus string) *v1.Pod {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}}
		if gpus != "" {
			p.Annotations = map[string]string{"test/claim-gpus": gpus}
		}
		return p
	}
	dra := fakeDRA{}
	tests := []struct {
		name  string
		pod   *v1.Pod
		dra   dragpus.GPUs
		count int
		ok    bool
	}{
		{"extended resource", gt.MakeGPUPod("p").GPUs(2).Obj(), dra, 2, true},
		{"claims for 3 GPUs", withClaims(gt.MakeGPUPod("p").Obj(), "xxx"), dra, 3, true},
		{"claims for 3 GPUs, no DRA GPUs in the cycle", withClaims(gt.MakeGPUPod("p").Obj(), "xxx"), nil, 0, true},
		{"claims not readable yet", withClaims(gt.MakeGPUPod("p").Obj(), ""), dra, 0, true},
		{"malformed annotation", gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "2000").Obj(), dra, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := demandOf(context.Background(), tt.dra, tt.pod)
			if d.Count != tt.count || ok != tt.ok {
				t.Errorf("demand %+v, %t; want %d GPUs, %t", d, ok, tt.count, tt.ok)
			}
		})
	}
}
