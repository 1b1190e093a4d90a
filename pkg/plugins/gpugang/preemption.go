package gpugang

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

var _ gangview.Gangs = &GPUGang{}

// Close implements io.Closer, which the framework calls when its scheduler
// stops.
func (p *GPUGang) Close() error { return nil }

// FitAfterEviction implements gangview.Gangs for GPUPreemption's gang
// check. The members still to place are those of the gang GPUGang's
// PreFilter read in this cycle that are neither reserved nor bound (the
// pod of the cycle among them); their demands are read as PreFilter reads
// them (demandsOf, claims included), and they go only to the nodes their
// GPUs may go to (gangDemands.takes), as PreFilter's fit on empty nodes.
// A node's GPUs are those allocated after the evictions:
//   - gpusched's ledger without what each evicted pod holds on the node;
//   - DRA's devices as allocated now: the DynamicResources plugin has no
//     PreFilterExtensions, so the scheduler's preemption never counts an
//     evicted pod's claims as freed, and neither does this check.
func (p *GPUGang) FitAfterEviction(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, evicted func(*v1.Pod) bool) (key string, needed int, reason string, ok bool) {
	gs, ledger := gangOf(state), gpuledger.Read(state)
	if gs == nil || ledger == nil {
		return "", 0, "", false
	}
	placed := p.placed(gs.key)
	var pending []*v1.Pod
	for _, m := range p.members(gs.key) {
		if _, in := placed[string(m.UID)]; !in {
			pending = append(pending, m)
		}
	}
	needed = max(0, gs.minMember-len(placed))
	if needed == 0 {
		return gs.key, 0, "", true
	}
	dra := dragpus.Read(state)
	demands := demandsOf(ctx, dra, pending)
	views := make([]*gpu.NodeGPUs, 0, len(nodes))
	for _, ni := range nodes {
		n := ni.Node()
		if n == nil {
			continue
		}
		if v := draOf(dra, n.Name); v != nil {
			if demands.takes(dra, ni, true) {
				views = append(views, v)
			}
			continue
		}
		if !demands.takes(dra, ni, false) {
			continue
		}
		view := ledger.NodeView(ni)
		for _, pi := range ni.GetPods() {
			if pod := pi.GetPod(); evicted(pod) {
				if a, held := ledger.Held(pod); held && a.Node == view.Name {
					view = view.Without(&a)
				}
			}
		}
		views = append(views, view)
	}
	if fit := gang.FitFree(views, demands.demands, needed); !fit.Fits() {
		return gs.key, needed, fit.Reason(), true
	}
	return gs.key, needed, "", true
}

// draOf is the node's DRA-published GPUs with DRA's allocations, or nil.
func draOf(dra dragpus.GPUs, node string) *gpu.NodeGPUs {
	if dra == nil {
		return nil
	}
	return dra.NodeGPUs(node)
}

// Siblings returns the gang pod belongs to ("namespace/name") and its bound
// members, pod included; an empty key for a pod outside a gang.
func (p *GPUGang) Siblings(pod *v1.Pod) (key string, bound []*v1.Pod) {
	keys, _ := groupOfObject(pod)
	if len(keys) == 0 {
		return "", nil
	}
	for _, m := range p.members(keys[0]) {
		if m.Spec.NodeName != "" {
			bound = append(bound, m)
		}
	}
	return keys[0], bound
}
