package gpu

import (
	"math"
	"slices"
	"sync/atomic"

	packinglp "github.com/gpusched/gpusched/pkg/packing"
)

// PolicyPairFit is FragFit with shares paired by the packing LP's prices of
// the typical pods' item sizes: a share goes where its GPU loses the least
// of the weight it could still hold. See docs/policies.md.
const PolicyPairFit PolicyType = "PairFit"

// pairFit places a share where it loses the least of what its GPU could
// still hold (the pairing loss, sharePrices.loss), then as FragFit would;
// whole GPUs and pods without GPUs as FragFit, with large differences in
// the fragment's growth counted inside FragFit's levels.
type pairFit struct {
	fragFit
	// prices are the prices of the typical pods last asked about.
	prices atomic.Pointer[sharePrices]
}

// Choose puts a share on the GPU with the least pairing loss, then the
// tightest such GPU, then the lowest; whole GPUs as FragFit places them.
func (p *pairFit) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return chooseWhole(n, d.Count, candidates)
	}
	prices := p.pricesFor(p.shapes.Typical())
	best, bestLoss, bestFree := -1, int64(math.MaxInt64), int64(0)
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		free := n.FreeMilli(i)
		loss, left := prices.loss(free, d.Milli), free-d.Milli
		if loss < bestLoss || (loss == bestLoss && left < bestFree) {
			best, bestLoss, bestFree = i, loss, left
		}
	}
	return 1 << uint(best)
}

// Score orders placements of a share by its pairing loss, least first, then
// by FragFit's score: score = (1023 − loss) << 40 + FragFit's.
//
// Other pods are ordered by FragFit's level, then by the fragment's growth
// in steps of 100 milli-GPU, least first, then by FragFit's fit:
// score = level << 40 + (2^15 − 1 − ⌊ΔF/100⌋) << 20 + fit, ΔF clamped to
// ±3,276,800. The level's width is 40 milli-GPU where the fragment barely
// changes and grows to hundreds of milli-GPU where it changes a lot; there
// a pod that strands a GPU's worth more than another (behind used-up CPU,
// typically) is told apart from it.
func (p *pairFit) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	typical := p.shapes.Typical()
	free := freeOf(n)
	before := n.fragmentOf(free[:n.Len()], h.free(), typical)
	var freeGPU, loss int64
	for i := range n.Used {
		if chosen.Has(i) {
			if d.IsShare() {
				loss = p.pricesFor(typical).loss(free[i], d.Milli)
			}
			free[i] -= d.Milli
		}
		freeGPU += free[i]
	}
	after := n.fragmentOf(free[:n.Len()], h.after(d), typical)
	level := fgdScore(before, after)
	fit := fragFitFit(n, d, h, freeGPU)
	if d.IsShare() {
		return (maxPairingLoss-min(loss, maxPairingLoss))<<40 + level<<20 + fit
	}
	const half = 1 << 15
	step := int64(min(2*half-1, max(0, math.Floor((after-before)/growthStep)+half)))
	return level<<40 + (2*half-1-step)<<20 + fit
}

// growthStep is the step, in milli-GPU, in which PairFit compares the
// fragment's growth among placements of equal level.
const growthStep = 100

// maxPairingLoss bounds a pairing loss in a score; a loss is at most a
// GPU's weight, which is at most MilliPerGPU.
const maxPairingLoss = 1023

// sharePrices are the packing LP's weights of one set of typical pods' item
// sizes, and what they make of a GPU's free room.
type sharePrices struct {
	// typical is the typical pods they were last asked for; the backing
	// array, held here, cannot be reused while the prices hold it. mix is
	// those pods' items, which the prices are a function of.
	typical []TypicalPod
	mix     itemMix
	// sizes are the typical items' sizes (a share's milli-GPU; 1000 for a
	// GPU of a whole-GPU pod), ascending, and weights their weights.
	sizes   []int64
	weights []float64
	// best[x] is the most weight of typical items (any number of each)
	// that fits in x milli-GPU.
	best [MilliPerGPU + 1]float64
}

// weight is a share's weight: its size's, or for a size no typical pod has,
// that of the largest typical size below it (it takes at least the room of
// that one); 0 below every typical size.
func (s *sharePrices) weight(milli int64) float64 {
	i, found := slices.BinarySearch(s.sizes, milli)
	if found {
		return s.weights[i]
	}
	if i == 0 {
		return 0
	}
	return s.weights[i-1]
}

// loss is the pairing loss of putting a share of milli on a GPU with free
// milli-GPU free: best[free] − (weight + best[free − milli]), the weight
// the GPU can no longer hold, rounded to whole milli-GPU. It is 0 when
// the share belongs to one of the heaviest fillings of the free room: a
// 470 on an idle GPU, whose remaining 530 another 470 fills, or on a GPU
// a 470 half fills.
func (s *sharePrices) loss(free, milli int64) int64 {
	free = min(max(free, 0), MilliPerGPU)
	rest := min(max(free-milli, 0), MilliPerGPU)
	return int64(max(0, math.Round(s.best[free]-s.weight(milli)-s.best[rest])))
}

// pricesFor returns the prices of typical. Typical pods that changed
// (a ShapeWindow recomputes them every 64 pods) are priced again only when
// their items' mix (itemMix) changed: prices are a function of the mix,
// and pricing takes the packing LP, milliseconds to a fraction of a
// second. Concurrent callers may each price a new mix once.
func (p *pairFit) pricesFor(typical []TypicalPod) *sharePrices {
	last := p.prices.Load()
	if last != nil && sameTypical(last.typical, typical) {
		return last
	}
	mix := itemMixOf(typical)
	s := &sharePrices{}
	if last != nil && slices.Equal(last.mix, mix) {
		*s = *last
	} else {
		s = newSharePrices(mix)
	}
	s.typical = typical
	p.prices.Store(s)
	return s
}

// itemMix is a set of typical pods' GPU items: per item size (a share's
// milli-GPU; 1000 for each GPU of a whole-GPU pod), ascending, its share of
// all items in parts per mixResolution, at least 1 for a size present.
type itemMix []sizeCount

type sizeCount struct{ size, count int64 }

// mixResolution is the resolution of an itemMix: a mix is priced again
// when a size's share of the items moves by a thousandth.
const mixResolution = 1000

func itemMixOf(typical []TypicalPod) itemMix {
	weights := map[int64]float64{}
	var total float64
	for i := range typical {
		if size, n := typical[i].Demand.PackingItems(); n > 0 {
			weights[size] += typical[i].Weight * float64(n)
			total += typical[i].Weight * float64(n)
		}
	}
	mix := make(itemMix, 0, len(weights))
	if total <= 0 {
		return mix // no GPU items: nothing to price, every loss is 0
	}
	for size, w := range weights {
		mix = append(mix, sizeCount{size, max(1, int64(math.Round(w/total*mixResolution)))})
	}
	slices.SortFunc(mix, func(a, b sizeCount) int { return int(a.size - b.size) })
	return mix
}

// newSharePrices prices mix's item sizes with the packing LP's weights
// (packinglp.Bound) for the items in proportion, on just enough GPUs to
// hold them all: the protocol's cluster at arrived 100%. If the LP fails,
// every size weighs its milli-GPU (best then packs by size alone).
func newSharePrices(mix itemMix) *sharePrices {
	s := &sharePrices{mix: mix}
	counts := make([]int64, len(mix))
	var total int64
	for i, m := range mix {
		s.sizes = append(s.sizes, m.size)
		counts[i] = m.count
		total += m.size * m.count
	}
	s.weights = make([]float64, len(s.sizes))
	cert, err := packinglp.Bound(s.sizes, counts, (total+MilliPerGPU-1)/MilliPerGPU)
	for i, size := range s.sizes {
		s.weights[i] = float64(size)
		if err == nil {
			s.weights[i] = cert.Weights[size]
		}
	}
	for x := 1; x <= MilliPerGPU; x++ {
		b := s.best[x-1]
		for i, size := range s.sizes {
			if size <= int64(x) {
				b = max(b, s.best[x-int(size)]+s.weights[i])
			}
		}
		s.best[x] = b
	}
	return s
}
