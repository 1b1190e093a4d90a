package gpuplacement

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement/internal/dra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuhealth"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

var _ gpuledger.Ledger = &GPUPlacement{}

// Close implements io.Closer, which the framework calls when its scheduler
// stops.
func (p *GPUPlacement) Close() error {
	if p.stop != nil {
		p.stop()
	}
	if p.external != nil {
		return p.external.Close()
	}
	return nil
}

// PreemptionView (gpuledger.Ledger) is what GPU-aware preemption needs to
// choose victims on a node: the node's GPUs as the ledger holds them with every pod of nodeInfo
// on it, and the request the pod of the cycle makes (its demand, and the
// GPUs the telemetry excludes). ok is false when the pod asks for no GPU,
// or when DRA allocates the node's GPUs: then preemption weighs the node
// with the Filter plugins alone.
func (p *GPUPlacement) PreemptionView(state fwk.CycleState, nodeInfo fwk.NodeInfo) (n *gpu.NodeGPUs, req *gpu.Request, ok bool) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, nil, false
	}
	demand := &data.(*podState).demand
	if demand.IsZero() {
		return nil, nil, false
	}
	if _, d := dra.NodeOf(state, nodeInfo.Node().Name); d != nil {
		return nil, nil, false
	}
	return p.nodeGPUs(nodeInfo), &gpu.Request{Demand: demand, Exclude: gpuhealth.Read(state)}, true
}

// Demand (gpuledger.Ledger) is the cycle's pod's demand as PreFilter read
// it; ok is false when PreFilter skipped the pod or refused it.
func (p *GPUPlacement) Demand(state fwk.CycleState) (*gpu.Demand, bool) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	return &data.(*podState).demand, true
}

// Held is the GPUs pod holds on its node as the ledger counts them: its
// gpusched.io/gpu-assigned annotation once bound, or the ledger's
// assumption while it is in flight.
func (p *GPUPlacement) Held(pod *v1.Pod) (gpu.Assignment, bool) {
	if a, ok := gpu.AssignmentOf(pod); ok {
		return a, true
	}
	return p.ledger.Assumed(pod.UID)
}

// NodeView is the node's GPUs as the ledger holds them with every pod of
// nodeInfo on it.
func (p *GPUPlacement) NodeView(nodeInfo fwk.NodeInfo) *gpu.NodeGPUs { return p.nodeGPUs(nodeInfo) }
