package gpugang

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
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
func (p *GPUGang) gangModels(key string, obj *unstructured.Unstructured, mixed bool, empty gang.ModelFit, nodes []fwk.NodeInfo) []string {
	if mixed {
		return nil
	}
	placed := p.placedModels(key)
	var free gang.ModelFit
	if len(placed) == 0 && len(empty.Holding()) > 1 {
		free = p.freeByModel(key, nodes, empty.Needed)
	}
	models, noneHolds := gang.ChooseModels(empty, free, placed)
	if noneHolds {
		p.reportOnce(obj, v1.EventTypeWarning, EventMixedModels, fmt.Sprintf(
			"gang %s: %s; placing it across models", key, empty.Reason()))
	}
	return models
}

// freeByModel places the gang's members (none is placed yet), per GPU
// model, in the GPUs free now on the nodes, as this plugin's ledger sees
// them; minMember of them must fit.
func (p *GPUGang) freeByModel(key string, nodes []fwk.NodeInfo, minMember int) gang.ModelFit {
	members := p.members(key)
	demands := make([]gpu.Demand, 0, len(members))
	for _, m := range members {
		if d, err := gpu.DemandFromPod(m); err == nil {
			demands = append(demands, d)
		}
	}
	views := make([]*gpu.NodeGPUs, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil {
			views = append(views, p.ledger.Node(n, ni.GetGeneration(), podsOf(ni)))
		}
	}
	return gang.FitFreeByModel(views, demands, minMember)
}

// placedModels returns the GPU models of the nodes of the gang's reserved
// and bound pods that ask for GPUs.
func (p *GPUGang) placedModels(key string) []string {
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
		if d, err := gpu.DemandFromPod(m); err != nil || d.IsZero() {
			continue
		}
		ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
		if err != nil || ni.Node() == nil {
			continue
		}
		for _, model := range gang.NodeModels(ni.Node()) {
			if !gang.SharesModel([]string{model}, out) {
				out = append(out, model)
			}
		}
	}
	return out
}

// Filter keeps a gang pod that asks for GPUs on nodes of the gang's GPU
// models (gangState.models, decided by PreFilter). A node of another model is
// UnschedulableAndUnresolvable (preempting its pods would not change its
// GPUs), with ReasonOtherModel. Nodes whose GPUs the Node object does not
// describe (DRA devices) pass: GPUPlacement decides there.
func (p *GPUGang) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	gs := gangOf(state)
	if gs == nil || len(gs.models) == 0 {
		return nil
	}
	// The ledger's view: the node's inventory is parsed once per node
	// version, not on every Filter call.
	node := nodeInfo.Node()
	if node == nil {
		return nil
	}
	models := gang.ModelsOf(p.ledger.Node(node, nodeInfo.GetGeneration(), podsOf(nodeInfo)))
	if len(models) == 0 || gang.SharesModel(models, gs.models) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonOtherModel+" ("+strings.Join(gs.models, ", ")+")")
}
