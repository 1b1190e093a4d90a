package gpu

import "unsafe"

// AnswerKey is what a policy's answers about a node (Place, Score,
// PlaceAndScore) depend on beyond the node's view, the demand, the host and
// the GPUs a request excludes: the typical pods it measures fragmentation
// against, the fleet's census, and the prices the fleet's free room sets.
// While a policy's key stays equal, it answers a question about an
// unchanged view as it did before, so a front end that keeps answers
// outside the engine (the simulator keeps each node's score per pod shape)
// keys them by it. A key holds identities, not values: it changes whenever
// one of them is computed again, even to an equal value. Keys are
// comparable; the zero key is that of a policy whose answers depend on
// nothing beyond the node.
type AnswerKey struct {
	typical  *TypicalPod
	typicals int
	census   *ModelCount
	models   int
	prices   *sharePrices
}

// AnswerKey is the policy's answer key now (see AnswerKey).
func (p *Policy) AnswerKey() AnswerKey {
	if !p.info.NeedsShapes {
		return AnswerKey{} // the strategy reads the view, the demand and the host alone
	}
	typical, census := p.shapes.Typical(), p.census()
	return AnswerKey{typical: unsafe.SliceData(typical), typicals: len(typical),
		census: unsafe.SliceData(census), models: len(census), prices: p.fleetPrices(typical)}
}

// FeaturesKey is the part of the answer key that a node's features
// (AppendFeatures) read beyond the view, the request and the choice they
// are given: the typical pods the fragmentation before and after is
// measured against. While it stays equal, AppendFeatures describes an
// unchanged view, request and choice as it did before.
func (p *Policy) FeaturesKey() AnswerKey {
	if p.shapes == nil {
		return AnswerKey{} // no fragmentation in the features
	}
	typical := p.shapes.Typical()
	return AnswerKey{typical: unsafe.SliceData(typical), typicals: len(typical)}
}
