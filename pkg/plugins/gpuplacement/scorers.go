package gpuplacement

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// ErrNoCycleState is NewScorers' and Scores' error for a cycle in which
// GPUPlacement's PreFilter did not run: a profile without the plugin.
var ErrNoCycleState = errors.New("the cycle has no " + Name + " state")

// Scorers scores nodes with policies other than GPUPlacement's own, as its
// Score would if each were its policy. The simulator's environment offers
// their scores as optional observation columns, so that a learned policy can
// read what FragFit or FGD would say beside the built-in policy's score.
// It reads nodes through the annotation ledger and skips pods without GPU
// demand as PreFilter does without DRA: a pod's own ResourceClaims and DRA
// nodes are not scored as the plugin would score them (the environment
// runs without DRA).
type Scorers struct {
	policies []*gpu.Policy
}

// NewScorers builds the policies for the plugin of the cycle: the plugin's
// own policy for its own type (with the profile's settings), and the others
// with their default settings, measured against the plugin's typical pods
// (shapes when its own policy measures against none) and the cluster's GPUs
// by model as the plugin reads them. Build them once per scheduler (an
// environment's episode), not per cycle: the engine remembers a policy's
// answers about a node while the node stays as it was.
func NewScorers(state fwk.CycleState, types []gpu.PolicyType, shapes gpu.Shapes) (*Scorers, error) {
	p, ok := gpuledger.Read(state).(*GPUPlacement)
	if !ok {
		return nil, ErrNoCycleState
	}
	if own := p.policy.Shapes(); own != nil {
		shapes = own
	}
	s := &Scorers{}
	for _, t := range types {
		if t == p.policy.Type() {
			s.policies = append(s.policies, p.policy)
			continue
		}
		pol, err := gpu.NewPolicy(t, gpu.PolicyConfig{Shapes: shapes, Fleet: p.fleet})
		if err != nil {
			return nil, err
		}
		s.policies = append(s.policies, pol)
	}
	return s, nil
}

// Scores returns, for each policy, one score per node in 0..1: the policy's
// engine scores for the pod (its demand as that policy reads it) of the
// nodes where the pod fits by it, rescaled over those nodes as the policy
// rescales (gpu.Policy.Rescale) and divided by the framework's maximum:
// what the policy's GPUPlacement would score; 0 where the pod does not fit,
// and everywhere when that policy would not score the pod.
func (s *Scorers) Scores(state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) ([][]float64, error) {
	p, ok := gpuledger.Read(state).(*GPUPlacement)
	if !ok {
		return nil, ErrNoCycleState
	}
	// The nodes' views and hosts are the same for every policy; only the
	// demand, as each policy reads the pod, changes.
	views, reqs, err := p.requests(state, nodes, nil)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(s.policies))
	for k, pol := range s.policies {
		demand, err := pol.Demand(pod)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pol.Type(), err)
		}
		out[k] = make([]float64, len(nodes))
		if !pol.Scores(&demand) {
			continue // that policy's GPUPlacement would not score the pod
		}
		for i := range reqs {
			reqs[i].Demand = &demand
		}
		var fit []int
		var scores []int64
		for i := range nodes {
			if _, f, score := pol.PlaceAndScore(views[i], &reqs[i]); f.OK() {
				fit = append(fit, i)
				scores = append(scores, score)
			}
		}
		pol.Rescale(scores, fwk.MaxNodeScore)
		for j, i := range fit {
			out[k][i] = float64(scores[j]) / float64(fwk.MaxNodeScore)
		}
	}
	return out, nil
}
