// Package dragpus carries, within one scheduling cycle, what GPUPlacement
// reads of DRA (the GPUs a DRA driver publishes on each node, what DRA has
// allocated of them, and what a pod's claims ask for) to the other gpusched
// plugins of the profile, through the cycle's CycleState. GPUGang plans a
// gang of claim pods with it, on the GPUs only DRA describes. A cycle
// without it has no DRA GPUs: no node publishes GPUs of the driver, DRA is
// off in GPUPlacement's args, or GPUPlacement is not in the profile.
package dragpus

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// StateKey is where GPUPlacement's PreFilter leaves the cycle's GPUs. A
// plugin reads them at its own PreFilter when it comes after GPUPlacement
// in the profile, and at every later extension point.
const StateKey fwk.StateKey = "gpusched.io/dra-gpus"

// GPUs is one cycle's view of the GPUs DRA hands out. Safe for concurrent
// use (Filter and Score run in parallel over nodes).
type GPUs interface {
	fwk.StateData
	// NodeGPUs is the node's GPUs that the driver publishes, with what DRA
	// has allocated of them (allocated claims and claims in flight)
	// counted; nil when the node publishes none.
	NodeGPUs(node string) *gpu.NodeGPUs
	// EmptyNodeGPUs is NodeGPUs with nothing allocated; nil when the node
	// publishes none.
	EmptyNodeGPUs(node string) *gpu.NodeGPUs
	// ServesGPUResource reports whether DRA serves whole GPUs asked for
	// as nvidia.com/gpu on the node (a DeviceClass maps the resource and
	// the node has none of it allocatable: KEP-5004), as the scheduler's
	// NodeResourcesFit and DynamicResources decide.
	ServesGPUResource(node fwk.NodeInfo) bool
	// ClaimDemand is what the pod's ResourceClaims ask of the driver's
	// GPUs, as a demand that holds on any node: a number of whole GPUs, or
	// a share of one GPU by its memory (Milli 1, MemoryMiB what the claim
	// consumes), with the GPU models the claim's class and selectors
	// admit. It is zero when the pod has no claim the policy reads (see
	// docs/dra.md), and pending is true when a claim cannot be read yet
	// (the resourceclaim controller has not made it from its template).
	ClaimDemand(ctx context.Context, pod *v1.Pod) (demand gpu.Demand, pending bool)
}

// Read returns the cycle's GPUs, or nil.
func Read(cs fwk.CycleState) GPUs {
	if cs == nil {
		return nil
	}
	data, err := cs.Read(StateKey)
	if err != nil {
		return nil
	}
	g, _ := data.(GPUs)
	return g
}
