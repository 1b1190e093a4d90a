package gpu

import "sync"

// NodeScore is one node's part in a pod's score step (ScoreStep).
type NodeScore struct {
	// Chosen are the GPUs the policy gives the pod on the node; Fits is
	// false where the demand does not fit there (Chosen is then empty).
	Chosen DeviceSet
	Fits   bool
	// Raw is the policy's engine score for Chosen, 0..MaxScore (0 where
	// the demand does not fit or the pod is not scored), and Score the
	// Raw scores of the step's nodes rescaled together (RescaleStep): a
	// node that does not fit may score above 0 there, as under a policy
	// that rescales by rank, and as GPUPlacement's NormalizeScore gives it.
	Raw, Score int64
}

// ScoreStep is the score step of a scheduling cycle for one pod, as every
// front end takes it and as GPUPlacement's Score and NormalizeScore compute
// it: on each node i (views[i], asked reqs[i], every request for the one
// pod's demand) the GPUs the policy chooses
// and its engine score for them (PlaceAndScore), then the scores of the
// step's nodes rescaled together to 0..maxScore (Rescale). A node the
// demand does not fit scores 0 and takes part in the rescaling. A nil view
// is a node outside the step (unknown, or refused before scoring): it is
// neither placed nor rescaled, and scores 0. A pod the policy does not
// score (Scores) is placed but scores 0 everywhere, unrescaled.
//
// each runs f over ranges of 0..len(views)−1 that together cover it once,
// in parallel where the front end wishes; nil runs f(0, len(views)). out
// must have len(views) entries; ScoreStep overwrites them.
func (p *Policy) ScoreStep(views []*NodeGPUs, reqs []Request, maxScore int64, each func(n int, f func(lo, hi int)), out []NodeScore) {
	scored := false // read from a request of the step: outside it, a request may be empty
	for i := range views {
		if views[i] != nil {
			scored = p.Scores(reqs[i].Demand)
			break
		}
	}
	place := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = NodeScore{}
			if views[i] == nil {
				continue
			}
			if scored {
				chosen, fit, score := p.PlaceAndScore(views[i], &reqs[i])
				if fit.OK() {
					out[i] = NodeScore{Chosen: chosen, Fits: true, Raw: score}
				}
				continue
			}
			if chosen, fit := p.Place(views[i], &reqs[i]); fit.OK() {
				out[i] = NodeScore{Chosen: chosen, Fits: true}
			}
		}
	}
	if each == nil {
		place(0, len(views))
	} else {
		each(len(views), place)
	}
	if scored {
		p.RescaleStep(views, out, maxScore)
	}
}

// RescaleStep sets each step node's Score to the Raw scores of the step's
// nodes (those with a view) rescaled together to 0..maxScore, as ScoreStep
// does; a front end that shows one step on two scales (the extender's
// 0..10 and the policy service's 0..1) rescales a copy of its answers.
func (p *Policy) RescaleStep(views []*NodeGPUs, out []NodeScore, maxScore int64) {
	buf := stepScores.Get().(*[]int64)
	raw := (*buf)[:0]
	for i := range out {
		if views[i] != nil {
			raw = append(raw, out[i].Raw)
		}
	}
	p.Rescale(raw, maxScore)
	k := 0
	for i := range out {
		if views[i] != nil {
			out[i].Score, k = raw[k], k+1
		}
	}
	*buf = raw
	stepScores.Put(buf)
}

// stepScores holds the scratch lists ScoreStep rescales in.
var stepScores = sync.Pool{New: func() any { return new([]int64) }}
