package gpuplacement

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/policyservice"
)

// externalKey is where PreScore leaves the policy service's scores, when
// they rank the cycle's nodes.
const externalKey fwk.StateKey = "PreScoreExternal" + Name

// externalState is the policy service's scores by node name, rescaled to
// the framework's 0..100 (policyservice.Rescale: its best node alone at 100).
type externalState struct{ scores map[string]int64 }

// Clone implements fwk.StateData; externalState is never modified after PreScore.
func (s *externalState) Clone() fwk.StateData { return s }

// newExternal connects the External scoring strategy's policy service;
// nil for the engine's policies.
func newExternal(args *config.GPUPlacementArgs) (*policyservice.Scorer, error) {
	if args.ScoringStrategy.Type != config.ScoringStrategyExternal {
		return nil, nil
	}
	return policyservice.New(args.External)
}

// preScoreExternal asks the policy service to score the pod's feasible
// nodes (docs/policy-service.md). In Enforce mode its scores, once
// checked, rank the nodes (Score reads them from the state); when they
// cannot be used the fallback policy's do, and an event on the pod says
// why. Either mode counts where the service's best node differs from the
// fallback policy's, and Shadow mode logs it.
func (p *GPUPlacement) preScoreExternal(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) {
	demand, status := demandOf(state)
	if status != nil {
		return
	}
	buf := featureBuffers.Get().(*featureBuffer)
	defer featureBuffers.Put(buf)
	feats, err := p.featuresInto(buf, &p.featureMemo, state, nodes, nil)
	if err != nil {
		p.reportFallback(pod, &policyservice.Fallback{Cause: policyservice.CauseError, Err: err})
		return
	}
	scores, fb := p.external.ScoreNodes(ctx, pod, demand, feats, p.policy.Type())
	if fb != nil {
		p.reportFallback(pod, fb)
		return
	}
	agree, external, builtin := p.external.Compare(feats, scores)
	if !agree {
		logger(ctx).V(2).Info("Policy service's best node differs from the fallback policy's", "pod", klog.KObj(pod),
			"mode", p.external.Config().Mode, "external", external, "fallback", builtin, "fallbackPolicy", p.policy.Type())
	}
	if p.external.Shadow() {
		return
	}
	rescaled := policyservice.Rescale(scores, fwk.MaxNodeScore)
	ext := &externalState{scores: make(map[string]int64, len(nodes))}
	for i := range feats {
		ext.scores[feats[i].Name] = rescaled[i]
	}
	state.Write(externalKey, ext)
}

// externalOf is the cycle's policy service scores; nil when the fallback
// policy's scores rank the nodes.
func externalOf(state fwk.CycleState) *externalState {
	if data, err := state.Read(externalKey); err == nil {
		return data.(*externalState)
	}
	return nil
}

// reportFallback records on the pod why the fallback policy scored its
// nodes.
func (p *GPUPlacement) reportFallback(pod *v1.Pod, fb *policyservice.Fallback) {
	if recorder := p.handle.EventRecorder(); recorder != nil {
		recorder.Eventf(pod, nil, v1.EventTypeWarning, "ExternalPolicyFallback", "Scheduling",
			"%s not used (%v): %s scored the nodes", p.external.Source(), fb, p.policy.Type())
	}
}
