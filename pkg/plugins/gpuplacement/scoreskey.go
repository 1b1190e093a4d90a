package gpuplacement

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement/internal/dra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuhealth"
)

// ScoresKey is what the plugin's scores in a cycle depend on beyond the
// pod's demand and the node scored: the cluster's largest capacities,
// which host-aware policies normalize by, and the policy's answer key
// (gpu.AnswerKey: its typical pods, the fleet's census and prices).
// Comparable.
type ScoresKey struct {
	maxima  gpu.Maxima
	answers gpu.AnswerKey
}

// NodeLocalScores is, after PreScore, the key of the plugin's scores in the
// cycle as it is now, when each node's score depends on the pod's demand,
// the node's NodeInfo (its Node object and its pods) and the key alone: a
// front end may then keep a node's raw score for a pod shape while the
// node and the key stay the same (the simulator does, see its nodeMemo),
// and should read the key again after scoring, since the fleet's free room
// may move the prices while nodes are scored. ok is false when a score
// depends on more (a policy service's or a model's scores under the
// External strategy, devices DRA allocates, GPUs excluded by health, a
// reservation the pod may take) or PreScore did not run. A node whose GPUs
// hold reservations for other pods (gpu.AnnotationReservations) changes
// when they expire, without a new NodeInfo: a front end keeping scores
// must not keep those nodes' (the simulator keeps none on such clusters).
func NodeLocalScores(state fwk.CycleState) (key ScoresKey, ok bool) {
	data, err := state.Read(scoresKeyKey)
	if err != nil {
		return ScoresKey{}, false
	}
	s := data.(*scoresKeyState)
	if !s.local {
		return ScoresKey{}, false
	}
	return ScoresKey{maxima: s.maxima, answers: s.policy.AnswerKey()}, true
}

// scoresKeyKey is where PreScore leaves what its scores' key is made of.
const scoresKeyKey fwk.StateKey = "PreScore" + Name + "/ScoresKey"

// scoresKeyState is what NodeLocalScores makes the key of: the cycle's
// maxima and the policy, whose answer key is read when asked (only the
// simulator asks; a scheduler's cycle pays a state write).
type scoresKeyState struct {
	maxima gpu.Maxima
	policy *gpu.Policy
	local  bool
}

// Clone implements fwk.StateData; scoresKeyState is never modified.
func (s *scoresKeyState) Clone() fwk.StateData { return s }

// writeScoresKey records what the cycle's scores depend on
// (NodeLocalScores), once PreScore wrote everything else the scores read.
func (p *GPUPlacement) writeScoresKey(state fwk.CycleState, s *podState) {
	out := &scoresKeyState{policy: p.policy,
		local: !s.mayTakeReservation && dra.CycleOf(state) == nil && externalOf(state) == nil && gpuhealth.Read(state) == nil}
	if data, err := state.Read(hostKey); err == nil {
		out.maxima = data.(*hostState).maxima
	}
	state.Write(scoresKeyKey, out)
}
