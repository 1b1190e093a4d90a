package gpu

import "unsafe"

// SeenCount is how many pod UIDs the window remembers as counted.
func (w *ShapeWindow) SeenCount() int64 { return w.nSeen.Load() }

// FrontMismatch names a node whose entry in the ledger's front cache is not
// its current entry, if there is one.
func (l *Ledger) FrontMismatch() (string, bool) {
	front := l.front.Load()
	if front == nil {
		return "", false
	}
	for i := range front {
		if c := front[i].Load(); c != nil && l.cached(c.source.Name) != c {
			return c.source.Name, true
		}
	}
	return "", false
}

// HasFront reports whether the ledger has allocated its front cache.
func (l *Ledger) HasFront() bool { return l.front.Load() != nil }

// PairFitPrices exposes PairFit's prices of typical's sizes.
func PairFitPrices(typical StaticShapes) PricesForTest {
	return PricesForTest{newSharePrices(typical, nil, nil)}
}

// PricesForTest is a sharePrices for tests.
type PricesForTest struct{ p *sharePrices }

func (p PricesForTest) Weight(milli int64) float64 { return p.p.weightOf(&Demand{}, milli) }
func (p PricesForTest) Loss(free, milli int64) int64 {
	return p.p.loss(p.p.unlimited, free, milli, p.Weight(milli))
}

// PairFitPricing asks p, a PairFit policy, for its prices of typical and
// returns where their weights live: the same address for a mix it did not
// price again.
func PairFitPricing(p *Policy, typical []TypicalPod) *float64 {
	return unsafe.SliceData(p.strategy.(*pairFit).prices.pricesFor(typical).weights)
}
