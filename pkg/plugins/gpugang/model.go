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
// (podgroup.AnnotationGPUModels):
//   - once pods of the gang with GPUs are reserved or bound, the models of
//     their nodes, when the gang fits on them (normally one);
//   - before that, the models on which the whole gang fits with every GPU
//     free (byModel), so that the first pod goes where the rest can follow;
//   - when no single model holds the gang, any: the PodGroup gets a
//     GangMixedModels event naming each model and how many pods fit on it,
//     and the gang is placed across models rather than never.
func (p *GPUGang) gangModels(key string, obj *unstructured.Unstructured, mixed bool, byModel gang.ModelFit) []string {
	if mixed {
		return nil
	}
	holding := byModel.Holding()
	if len(holding) == 0 {
		if len(byModel.Models) > 1 {
			p.reportOnce(obj, v1.EventTypeWarning, EventMixedModels, fmt.Sprintf(
				"gang %s: %s; placing it across models", key, byModel.Reason()))
		}
		return nil
	}
	var used []string
	for _, m := range p.placedModels(key) {
		if gang.SharesModel([]string{m}, holding) {
			used = append(used, m)
		}
	}
	if len(used) > 0 {
		return used
	}
	return holding
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
	models := gang.NodeModels(nodeInfo.Node())
	if len(models) == 0 || gang.SharesModel(models, gs.models) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonOtherModel+" ("+strings.Join(gs.models, ", ")+")")
}
