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
// cycle, when each node's score depends on the pod's demand, the node's
// NodeInfo (its Node object and its pods) and the key alone: a front end
// may then keep a node's raw score for a pod shape while the node and the
// key stay the same (the simulator does, see its nodeMemo). ok is false
// when a score depends on more (a policy service's or a model's scores
// under the External strategy, devices DRA allocates, GPUs excluded by
// health, a reservation the pod may take) or PreScore did not run.
func NodeLocalScores(state fwk.CycleState) (key ScoresKey, ok bool) {
	data, err := state.Read(scoresKeyKey)
	if err != nil {
		return ScoresKey{}, false
	}
	s := data.(*scoresKeyState)
	return s.key, s.local
}

// scoresKeyKey is where PreScore leaves its scores' key.
const scoresKeyKey fwk.StateKey = "PreScore" + Name + "/ScoresKey"

type scoresKeyState struct {
	key   ScoresKey
	local bool
}

// Clone implements fwk.StateData; scoresKeyState is never modified.
func (s *scoresKeyState) Clone() fwk.StateData { return s }

// writeScoresKey records the key of the cycle's scores (NodeLocalScores),
// once PreScore wrote everything else the scores read.
func (p *GPUPlacement) writeScoresKey(state fwk.CycleState, s *podState) {
	local := !s.mayTakeReservation && dra.CycleOf(state) == nil && externalOf(state) == nil && gpuhealth.Read(state) == nil
	key := ScoresKey{answers: p.policy.AnswerKey()}
	if data, err := state.Read(hostKey); err == nil {
		key.maxima = data.(*hostState).maxima
	}
	state.Write(scoresKeyKey, &scoresKeyState{key: key, local: local})
}
