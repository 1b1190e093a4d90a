// Package gpuledger hands GPUPlacement's ledger of the profile's GPUs, and
// the demand of the cycle's pod as it read it, to the other plugins of the
// same scheduling cycle (GPUGang, GPUPreemption, GPUTelemetry, the
// simulator's environment) through the cycle's CycleState, so that they
// read the same allocations, pods assumed in flight included, without a
// second ledger and without finding the plugin through a package-level
// registry. GPUPlacement writes it at the start of PreFilter; a cycle of a
// profile without GPUPlacement has none.
package gpuledger

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/cyclestate"
)

// StateKey is where the cycle's ledger is kept.
const StateKey fwk.StateKey = "gpusched.io/ledger"

// Ledger is GPUPlacement's view of the GPUs of the profile's nodes.
type Ledger interface {
	// NodeView is the node's GPUs as the ledger holds them with every pod
	// of nodeInfo on it.
	NodeView(nodeInfo fwk.NodeInfo) *gpu.NodeGPUs
	// Held is the GPUs pod holds on its node as the ledger counts them: its
	// gpusched.io/gpu-assigned annotation once bound, or the ledger's
	// assumption while it is in flight.
	Held(pod *v1.Pod) (gpu.Assignment, bool)
	// PreemptionView is the node's GPUs and the request of the cycle's pod
	// (its demand, and the GPUs the telemetry excludes); ok is false when
	// the pod asks for no GPU or DRA allocates the node's GPUs.
	PreemptionView(state fwk.CycleState, nodeInfo fwk.NodeInfo) (n *gpu.NodeGPUs, req *gpu.Request, ok bool)
	// Demand is the cycle's pod's GPU demand as GPUPlacement's PreFilter
	// read it, so that the other plugins of the cycle do not parse it
	// again; ok is false when the pod is malformed, or asks for no GPU and
	// is not scored.
	Demand(state fwk.CycleState) (d *gpu.Demand, ok bool)
}

// Write records l as the cycle's ledger. The ledger is shared, not
// copied: a preemption's clone of the cycle sees the same allocations.
func Write(cs fwk.CycleState, l Ledger) { cyclestate.Write(cs, StateKey, l) }

// Read returns the cycle's ledger, or nil.
func Read(cs fwk.CycleState) Ledger {
	l, _ := cyclestate.Read[Ledger](cs, StateKey)
	return l
}
