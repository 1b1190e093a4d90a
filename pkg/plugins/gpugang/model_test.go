package gpugang

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
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
// nodes (with nothing allocated) and, for a pod with claims, the number of
// whole GPUs its test/claim-gpus annotation has characters, or pending
// when the annotation is "pending".
type fakeDRA map[string]*gpu.NodeGPUs

func (f fakeDRA) Clone() fwk.StateData                    { return f }
func (f fakeDRA) NodeGPUs(node string) *gpu.NodeGPUs      { return f[node] }
func (f fakeDRA) EmptyNodeGPUs(node string) *gpu.NodeGPUs { return f[node] }
func (f fakeDRA) ServesGPUResource(fwk.NodeInfo) bool     { return true }

// withoutGPUResource is a fakeDRA where no DeviceClass maps nvidia.com/gpu.
type withoutGPUResource struct{ fakeDRA }

func (withoutGPUResource) ServesGPUResource(fwk.NodeInfo) bool { return false }
func (f fakeDRA) ClaimDemand(_ context.Context, pod *v1.Pod) (gpu.Demand, bool) {
	switch a := pod.Annotations["test/claim-gpus"]; a {
	case "pending":
		return gpu.Demand{}, true
	case "":
		return gpu.Demand{}, false
	default:
		return gpu.Demand{Count: len(a), Milli: gpu.MilliPerGPU}, false
	}
}

// claimPod is a pod with a claim for gpus ("xxx" for 3 GPUs, "pending"),
// in gang g.
func claimPod(name, gpus string) *v1.Pod {
	p := gt.MakeGPUPod(name).UID(name).Obj()
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}}
	if gpus != "" {
		p.Annotations = map[string]string{"test/claim-gpus": gpus}
	}
	return p
}

// TestMemberOf: a gang member's GPUs are its annotation's or extended
// resources', else what its claims ask; a claim pod asks for none without
// DRA GPUs in the cycle, and waits while its claims cannot be read.
func TestMemberOf(t *testing.T) {
	dra := fakeDRA{}
	tests := []struct {
		name string
		pod  *v1.Pod
		dra  dragpus.GPUs
		want member
	}{
		{"extended resource", gt.MakeGPUPod("p").GPUs(2).Obj(), dra, member{demand: gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}}},
		{"claims for 3 GPUs", claimPod("p", "xxx"), dra, member{demand: gpu.Demand{Count: 3, Milli: gpu.MilliPerGPU}, claims: true}},
		{"claims for 3 GPUs, no DRA GPUs in the cycle", claimPod("p", "xxx"), nil, member{}},
		{"claims for no GPU", claimPod("p", ""), dra, member{}},
		{"claims not made yet", claimPod("p", "pending"), dra, member{pending: true}},
		{"malformed annotation", gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "2000").Obj(), dra, member{malformed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := memberOf(context.Background(), tt.dra, tt.pod)
			if got.demand.Count != tt.want.demand.Count || (got.demand.Count > 0 && got.demand.Milli != tt.want.demand.Milli) ||
				got.claims != tt.want.claims || got.pending != tt.want.pending || got.malformed != tt.want.malformed {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestFitEmptyByKind: a gang is planned on the nodes its GPUs may be on.
// Node dra has 8 A100s a DRA driver publishes, node dp 8 T4s of the
// device plugin. Claims go only to DRA devices, gpusched's shares never do,
// and whole GPUs go to either where DRA serves nvidia.com/gpu; a gang of
// claims and shares is checked against both.
func TestFitEmptyByKind(t *testing.T) {
	dra := fakeDRA{"dra": gt.EmptyDRAView("dra", a100, 8)}
	nodes := []fwk.NodeInfo{}
	for _, n := range []*v1.Node{gt.MakeGPUNode("dra").Obj(), gt.MakeGPUNode("dp").GFD(t4, 8, 15360).Obj()} {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		nodes = append(nodes, ni)
	}
	share := func(name string) *v1.Pod { return gt.MakeGPUPod(name).UID(name).Milli(500).Obj() }
	whole := func(name string) *v1.Pod { return gt.MakeGPUPod(name).UID(name).GPUs(4).Obj() }
	tests := []struct {
		name    string
		dra     dragpus.GPUs
		members []*v1.Pod
		want    []gang.ModelCount
		mixed   bool
	}{
		// 2 claims of 4 GPUs: the A100 node holds both; the T4s take no claim.
		{"claims", dra, []*v1.Pod{claimPod("a", "xxxx"), claimPod("b", "xxxx")}, []gang.ModelCount{{Model: a100, Placed: 2}}, false},
		// 2 shares of 500: the T4s hold both (on one GPU); the A100s give no share.
		{"shares", dra, []*v1.Pod{share("a"), share("b")}, []gang.ModelCount{{Model: t4, Placed: 2}}, false},
		// 2 pods of 4 whole GPUs: each model holds both.
		{"whole GPUs", dra, []*v1.Pod{whole("a"), whole("b")}, []gang.ModelCount{{Model: a100, Placed: 2}, {Model: t4, Placed: 2}}, false},
		// No DeviceClass maps nvidia.com/gpu: the A100s serve no such pod.
		{"whole GPUs, nvidia.com/gpu not served by DRA", withoutGPUResource{dra}, []*v1.Pod{whole("a"), whole("b")}, []gang.ModelCount{{Model: t4, Placed: 2}}, false},
		// A claim and a share: both kinds of node, each model holding
		// both (4 + 1 GPUs of 8).
		{"a claim and a share", dra, []*v1.Pod{claimPod("a", "xxxx"), share("b")}, []gang.ModelCount{{Model: a100, Placed: 2}, {Model: t4, Placed: 2}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &GPUGang{ledger: gpu.NewLedger()}
			demands := demandsOf(context.Background(), tt.dra, tt.members)
			fit := p.fitEmpty("default/g", demands, nodes, 2, tt.dra)
			if !fit.fit.Fits() || !slices.Equal(fit.byModel.Models, tt.want) || demands.mixed() != tt.mixed {
				t.Errorf("fits %t, by model %v, mixed %t; want true, %v, %t", fit.fit.Fits(), fit.byModel.Models, demands.mixed(), tt.want, tt.mixed)
			}
		})
	}
}
