package gpugang

import (
	"cmp"
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
)

// A gang's GPUs are those GPUPlacement places its pods on: on a node whose
// GPUs a DRA driver publishes, the driver's devices with DRA's
// allocations, and a member's demand is what its ResourceClaims ask
// (dragpus, left in the cycle by GPUPlacement's PreFilter, which comes
// before GPUGang's in the profile); elsewhere the node's inventory and
// gpusched's ledger, and the member's annotation or extended resources.

// demandOf is a member's GPU demand: its annotation or extended resources
// (gpu.DemandFromPod) or, when it asks for none that way, what its claims
// ask of the DRA driver's GPUs. ok is false for a malformed demand. A
// member whose claims cannot be read yet (the resourceclaim controller
// has not created them) counts as asking for no GPU until they can.
func demandOf(ctx context.Context, dra dragpus.GPUs, pod *v1.Pod) (gpu.Demand, bool) {
	d, err := gpu.DemandFromPod(pod)
	if err != nil {
		return gpu.Demand{}, false
	}
	if d.IsZero() && dra != nil && len(pod.Spec.ResourceClaims) > 0 {
		if claims, ok := dra.ClaimDemand(ctx, pod); ok {
			return claims, true
		}
	}
	return d, true
}

// membersDemands is the members' demands, in the order of their UIDs (the
// index returns members in no particular order), leaving out malformed
// ones.
func membersDemands(ctx context.Context, dra dragpus.GPUs, members []*v1.Pod) []gpu.Demand {
	sorted := slices.SortedFunc(slices.Values(members), func(a, b *v1.Pod) int { return cmp.Compare(a.UID, b.UID) })
	out := make([]gpu.Demand, 0, len(sorted))
	for _, m := range sorted {
		if d, ok := demandOf(ctx, dra, m); ok {
			out = append(out, d)
		}
	}
	return out
}

// draEmpty is the node's DRA-published GPUs with nothing allocated, or nil.
func draEmpty(dra dragpus.GPUs, node string) *gpu.NodeGPUs {
	if dra == nil {
		return nil
	}
	return dra.EmptyNodeGPUs(node)
}

// nodeGPUs is the node's GPUs with what is allocated on them: the DRA
// driver's when the node publishes them, else the ledger's view, whose
// inventory is parsed once per node version.
func (p *GPUGang) nodeGPUs(dra dragpus.GPUs, ni fwk.NodeInfo) *gpu.NodeGPUs {
	node := ni.Node()
	if dra != nil {
		if v := dra.NodeGPUs(node.Name); v != nil {
			return v
		}
	}
	return p.ledger.Node(node, ni.GetGeneration(), podsOf(ni))
}
