package gpu

import (
	"math"
	"slices"
	"sync/atomic"

	packinglp "github.com/gpusched/gpusched/pkg/packing"
)

// PolicyPairFit places every pod where its node loses the least of the
// weight, at the packing LP's prices of the typical pods' item sizes, that
// its free GPU room could still hold, then as FragFit would. See
// docs/policies.md.
const PolicyPairFit PolicyType = "PairFit"

// pairFit scores a placement by the node's loss (nodeLoss): the weight its
// free GPU room could hold before, less the pod's own weight and what the
// room could hold after. Room stops counting when the node's free CPU or
// memory admits no typical pod with GPUs. Ties go to FragFit's level, then,
// for pods other than shares, the fragment's growth, then FragFit's fit.
// Inside a node, a share goes on the GPU it pairs best with (Choose).
type pairFit struct {
	fragFit
	// prices are the prices of the typical pods last asked about.
	prices atomic.Pointer[sharePrices]
}

// Choose puts a share on the GPU with the least pairing loss, then the
// tightest such GPU, then the lowest; whole GPUs as FragFit places them.
// The node's CPU and memory are the same whichever GPU a share takes, so
// the GPU of least pairing loss is the one of least nodeLoss.
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

// Score orders placements by the node's loss (nodeLoss), least first, then
// by FragFit's level; shares then by FragFit's fit, other pods by the
// fragment's growth in steps of 100 milli-GPU, least first, then by
// FragFit's fit:
//
//	share:     score = (2^17 − loss) << 43 + level << 36 + fit
//	other pod: score = (2^17 − loss) << 43 + level << 36 + (2^16 − 1 − growth) << 20 + fit
//
// with growth = ⌊ΔF/100⌋ + 2^15 clamped to 0..2^16 − 1 and loss clamped to
// ±(2^17 − 1). A level spans 40 milli-GPU of growth where the fragment
// barely changes and hundreds where it changes a lot; there the growth
// step tells apart a pod that strands a GPU's worth more than another.
func (p *pairFit) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	typical := p.shapes.Typical()
	prices := p.pricesFor(typical)
	free := freeOf(n)
	hostBefore, hostAfter := h.free(), h.after(d)
	before := n.fragmentOf(free[:n.Len()], hostBefore, typical)
	valueBefore := prices.roomValue(n, free[:n.Len()], hostBefore, typical)
	var freeGPU int64
	for i := range n.Used {
		if chosen.Has(i) {
			free[i] -= d.Milli
		}
		freeGPU += free[i]
	}
	after := n.fragmentOf(free[:n.Len()], hostAfter, typical)
	valueAfter := prices.roomValue(n, free[:n.Len()], hostAfter, typical)
	loss := nodeLoss(valueBefore, prices.demandWeight(d), valueAfter)
	level := fgdScore(before, after)
	fit := fragFitFit(n, d, h, freeGPU)
	growth := int64(growthKeys - 1) // shares: a growth key of 0
	if !d.IsShare() {
		growth = min(growthKeys-1, max(0, int64(math.Floor((after-before)/growthStep))+growthKeys/2))
	}
	return (maxNodeLoss+1-loss)<<43 + level<<36 + (growthKeys-1-growth)<<20 + fit
}

// nodeLoss is the weight a placement costs its node: what the node's free
// GPU room could hold before, less what the pod itself weighs and what the
// room can hold after, rounded to whole milli-GPU. It is negative when
// the pod uses room that could hold nothing anyway (behind used-up CPU:
// the pod fits, no typical pod with GPUs does), and large when the pod
// takes a node's last CPU for GPU pods and its idle GPUs with it.
func nodeLoss(before, weight, after float64) int64 {
	loss := int64(math.Round(before - weight - after))
	return min(max(loss, -maxNodeLoss), maxNodeLoss)
}

// maxNodeLoss bounds a node's loss in a score: room holds at most
// MilliPerGPU of weight per GPU, MaxDevicesPerNode GPUs at most.
const maxNodeLoss = 1<<17 - 1

// growthKeys is the number of growth steps Score tells apart; growth
// is centred on growthKeys/2 (no change).
const growthKeys = 1 << 16

// growthStep is the step, in milli-GPU, in which PairFit compares the
// fragment's growth among placements of equal level.
const growthStep = 100

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

// demandWeight is what a pod's GPU items weigh: its share's weight, or
// each whole GPU's; 0 for a pod without GPUs.
func (s *sharePrices) demandWeight(d *Demand) float64 {
	size, n := d.PackingItems()
	if n == 0 {
		return 0
	}
	return float64(n) * s.weight(size)
}

// roomValue is the weight the node's free GPU room could still hold, with
// free its GPUs' free milli-GPU and hf its free CPU and memory: Σ best[f]
// over its GPUs, or 0 when no typical pod with GPUs fits in hf on the
// node's models (the room is stranded behind used-up CPU or memory).
func (s *sharePrices) roomValue(n *NodeGPUs, free []int64, hf hostFree, typical []TypicalPod) float64 {
	var v float64
	for _, f := range free {
		v += s.best[min(max(f, 0), MilliPerGPU)]
	}
	if v == 0 || !n.hostsGPUPod(hf, typical) { // a node without GPUs has no models to ask about
		return 0
	}
	return v
}

// hostsGPUPod reports whether some typical pod with GPUs fits in hf (CPU
// and memory) and may run on one of the node's models.
func (n *NodeGPUs) hostsGPUPod(hf hostFree, typical []TypicalPod) bool {
	for i := range typical {
		d := &typical[i].Demand
		if !d.IsZero() && d.MilliCPU <= hf.milliCPU && d.HostMemoryMiB <= hf.memoryMiB && n.allowsAny(d) {
			return true
		}
	}
	return false
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
	cert, err := packinglp.Bound(packinglp.Kinds(s.sizes), counts, []int64{(total + MilliPerGPU - 1) / MilliPerGPU})
	for i, size := range s.sizes {
		s.weights[i] = float64(size)
		if err == nil {
			s.weights[i] = cert.Weights[i]
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
