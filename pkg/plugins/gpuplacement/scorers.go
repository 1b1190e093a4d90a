package gpuplacement

import (
	"fmt"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// Scorers scores nodes with policies other than GPUPlacement's own, as its
// Score would if each were its policy. The simulator's environment offers
// their scores as optional observation columns, so that a learned policy can
// read what FragFit or FGD would say beside the built-in policy's score.
type Scorers struct {
	policies []*gpu.Policy
}

// NewScorers builds the policies for the cycle's GPUPlacement, with its
// typical pods (shapes when its own policy measures against none) and the
// cluster's GPUs by model as it reads them. Build them once per scheduler,
// not per cycle: the engine remembers a policy's answers about a node while
// the node stays as it was.
func NewScorers(state fwk.CycleState, types []gpu.PolicyType, shapes gpu.Shapes) (*Scorers, error) {
	p, ok := gpuledger.Read(state).(*GPUPlacement)
	if !ok {
		return nil, fmt.Errorf("the cycle has no %s PreFilter: the profile has no %s plugin", Name, Name)
	}
	if own := p.policy.Shapes(); own != nil {
		shapes = own
	}
	s := &Scorers{}
	for _, t := range types {
		pol, err := gpu.NewPolicy(t, gpu.PolicyConfig{Shapes: shapes, Fleet: p.fleet})
		if err != nil {
			return nil, err
		}
		s.policies = append(s.policies, pol)
	}
	return s, nil
}

// Scores returns, for each policy, one score per node in 0..1: the policy's
// engine scores of the nodes where the cycle's pod fits by it, rescaled
// over those nodes as the policy rescales (gpu.Policy.Rescale) and divided
// by the framework's maximum, what the policy's GPUPlacement would score;
// 0 where the pod does not fit.
func (s *Scorers) Scores(state fwk.CycleState, nodes []fwk.NodeInfo) ([][]float64, error) {
	p, ok := gpuledger.Read(state).(*GPUPlacement)
	if !ok {
		return nil, fmt.Errorf("the cycle has no %s PreFilter: the profile has no %s plugin", Name, Name)
	}
	views, reqs, err := p.requests(state, nodes)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(s.policies))
	for k, pol := range s.policies {
		var fit []int
		var scores []int64
		for i := range nodes {
			if _, f, score := pol.PlaceAndScore(views[i], &reqs[i]); f.OK() {
				fit = append(fit, i)
				scores = append(scores, score)
			}
		}
		pol.Rescale(scores, fwk.MaxNodeScore)
		out[k] = make([]float64, len(nodes))
		for j, i := range fit {
			out[k][i] = float64(scores[j]) / float64(fwk.MaxNodeScore)
		}
	}
	return out, nil
}
