package extender

import (
	"context"
	"slices"

	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/policyservice"
)

// UseExternal makes the extender's Prioritize ask the External scoring
// strategy's policy service, as GPUPlacement does (docs/policy-service.md);
// a no-op for the engine's policies. Call it before serving; Close closes
// the connection.
func (e *Extender) UseExternal(args *config.GPUPlacementArgs) error {
	if args.ScoringStrategy.Type != config.ScoringStrategyExternal {
		return nil
	}
	s, err := policyservice.New(args.External)
	if err != nil {
		return err
	}
	e.external = s
	return nil
}

// Close ends the background reads that settle binds of unknown outcome and
// lets go of the policy service's connection, if any.
func (e *Extender) Close() error {
	e.closeOnce.Do(func() { close(e.closed) })
	if e.external != nil {
		return e.external.Close()
	}
	return nil
}

// prioritizeExternal asks the policy service to score the candidates the
// demand fits on (step: the engine's score step over them), and writes its
// scores, rescaled to 0..MaxExtenderPriority, into out; false when its
// answer is not used (Shadow mode, or a fallback, logged with its cause)
// and the engine's scores stand.
func (e *Extender) prioritizeExternal(ctx context.Context, args *extenderv1.ExtenderArgs, cands []candidate, step *scoreStep, out extenderv1.HostPriorityList) bool {
	var fitting []int
	for i := range step.out {
		if step.out[i].Fits {
			fitting = append(fitting, i)
		}
	}
	if len(fitting) == 0 {
		return false
	}
	// The built-in score the features carry: the same step rescaled to
	// 0..100, as GPUPlacement's NormalizeScore rescales it.
	builtin := slices.Clone(step.out)
	e.policy.RescaleStep(step.views, builtin, 100)
	demand := step.reqs[fitting[0]].Demand
	feats := make([]gpu.NodeFeatures, len(fitting))
	for k, i := range fitting {
		alloc := cands[i].node.Status.Allocatable
		feats[k] = e.policy.Features(step.views[i], &step.reqs[i], true, step.out[i].Chosen, float64(builtin[i].Score)/100,
			alloc.Cpu().MilliValue(), alloc.Memory().Value()>>20)
	}
	scores, fb := e.external.ScoreNodes(ctx, args.Pod, demand, feats, e.policy.Type())
	logger := klog.FromContext(ctx)
	if fb != nil {
		logger.Info("Policy service not used; the fallback policy scored the nodes", "pod", klog.KObj(args.Pod), "cause", fb.Cause, "err", fb.Err, "fallbackPolicy", e.policy.Type())
		return false
	}
	if agree, external, builtin := e.external.Compare(feats, scores); !agree {
		logger.V(2).Info("Policy service's best node differs from the fallback policy's", "pod", klog.KObj(args.Pod),
			"mode", e.external.Config().Mode, "external", external, "fallback", builtin)
	}
	if e.external.Shadow() {
		return false
	}
	for k, v := range policyservice.Rescale(scores, extenderv1.MaxExtenderPriority) {
		out[fitting[k]].Score = v
	}
	return true
}
