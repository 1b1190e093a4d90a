package gpugang

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// ReasonOtherModel is Filter's reason for a node whose GPUs are not of the
// gang's model; the models follow in parentheses.
const ReasonOtherModel = "node's GPU model is not the gang's"

// EventMixedModels is the reason of the PodGroup event recorded when no
// single GPU model can hold the gang, so that its pods may run on several.
const EventMixedModels = "GangMixedModels"

// gangModels decides the GPU models a gang pod may run on; nil means any.
// A gang runs on one GPU model unless its PodGroup allows mixed models
// (podgroup.AnnotationGPUModels); gang.ChooseModels has the rule. When no
// single model holds the gang, the PodGroup gets a GangMixedModels event
// naming each model and how many pods fit on it, and the gang is placed
// across models rather than never.
func (p *GPUGang) gangModels(ctx context.Context, key string, obj *unstructured.Unstructured, mixed bool, empty gang.ModelFit, nodes []fwk.NodeInfo, dra dragpus.GPUs, ledger gpuledger.Ledger, demands gangDemands) []string {
	if mixed {
		return nil
	}
	placed := p.placedModels(ctx, key, dra, ledger)
	// The members placed, per GPU model, in the GPUs free now (none is
	// placed yet); minMember of them must fit.
	var free gang.ModelFit
	if len(placed) == 0 && len(empty.Holding()) > 1 {
		free = gang.FitFreeByModel(p.viewsOf(demands, dra, ledger, nodes), demands.demands, empty.Needed)
	}
	models, noneHolds := gang.ChooseModels(empty, free, placed)
	if noneHolds {
		p.reportOnce(obj, v1.EventTypeWarning, EventMixedModels, fmt.Sprintf(
			"gang %s: %s; placing it across models", key, empty.Reason()))
	}
	return models
}

// placedModels returns the GPU models of the nodes of the gang's reserved
// and bound pods that ask for GPUs.
func (p *GPUGang) placedModels(ctx context.Context, key string, dra dragpus.GPUs, ledger gpuledger.Ledger) []string {
	placed := p.placed(key)
	if len(placed) == 0 {
		return nil
	}
	var out []string
	for _, m := range p.members(key) {
		node, ok := placed[string(m.UID)]
		if !ok {
			continue
		}
		if d, ok := demandOf(ctx, dra, m); !ok || d.IsZero() {
			continue
		}
		ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
		if err != nil || ni.Node() == nil {
			continue
		}
		for _, model := range gang.ModelsOf(p.nodeGPUs(dra, ledger, ni)) {
			if !gang.SharesModel([]string{model}, out) {
				out = append(out, model)
			}
		}
	}
	return out
}

// Filter keeps a gang pod that asks for GPUs on nodes of the gang's GPU
// models (gangState.models, decided by PreFilter), the node's GPUs being
// those its pods are placed on (nodeGPUs: a DRA driver's devices where the
// node publishes them). A node of another model is
// UnschedulableAndUnresolvable (preempting its pods would not change its
// GPUs), with ReasonOtherModel. Nodes without GPUs pass.
func (p *GPUGang) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	gs := gangOf(state)
	if gs == nil || len(gs.models) == 0 {
		return nil
	}
	if nodeInfo.Node() == nil {
		return nil
	}
	models := gang.ModelsOf(p.nodeGPUs(dragpus.Read(state), gpuledger.Read(state), nodeInfo))
	if len(models) == 0 || gang.SharesModel(models, gs.models) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonOtherModel+" ("+strings.Join(gs.models, ", ")+")")
}
