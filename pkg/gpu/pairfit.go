package gpu

import (
	"math"
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
	// fragFit holds the shapes and the prices (priceCache) PairFit reads.
	fragFit
}

// Choose puts a share on the GPU with the least pairing loss, then the
// tightest such GPU, then the lowest; whole GPUs as FragFit places them.
// The node's CPU and memory are the same whichever GPU a share takes, so
// the GPU of least pairing loss is the one of least nodeLoss. A GPU's
// room is priced by its model's class (sharePrices.best), and on a node
// with GPUs of several models a share pays its class's pressure as in
// Score. Whole GPUs go as FragFit places them, whatever their models.
func (p *pairFit) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return chooseWhole(n, d.Count, candidates)
	}
	prices := p.prices.pricesFor(p.shapes.Typical())
	weight, node := prices.weightOf(d, d.Milli), prices.on(n)
	best, bestLoss, bestFree := -1, int64(math.MaxInt64), int64(0)
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		free := n.FreeMilli(i)
		loss := prices.loss(node.room(i), free, d.Milli, weight) + int64(math.Round(node.pressure(i)*float64(d.Milli)))
		left := free - d.Milli
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
	prices := p.prices.pricesFor(typical)
	node := prices.on(n)
	free := freeOf(n)
	hostBefore, hostAfter := h.free(), h.after(d)
	before := n.fragmentOf(free[:n.Len()], hostBefore, typical)
	valueBefore := node.roomValue(free[:n.Len()], hostBefore, typical)
	var freeGPU int64
	var pressed float64 // Σ pressure × milli-GPU over the GPUs it takes
	for i := range n.Used {
		if chosen.Has(i) {
			free[i] -= d.Milli
			pressed += float64(d.Milli) * node.pressure(i)
		}
		freeGPU += free[i]
	}
	after := n.fragmentOf(free[:n.Len()], hostAfter, typical)
	valueAfter := node.roomValue(free[:n.Len()], hostAfter, typical)
	loss := nodeLoss(valueBefore+pressed, prices.demandWeight(d), valueAfter)
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
// MilliPerGPU of weight per GPU, and a pressure of at most 1 adds as much
// again, MaxDevicesPerNode GPUs at most: 64 × 2000 < 2^17.
const maxNodeLoss = 1<<17 - 1

// growthKeys is the number of growth steps Score tells apart; growth
// is centred on growthKeys/2 (no change).
const growthKeys = 1 << 16

// growthStep is the step, in milli-GPU, in which PairFit compares the
// fragment's growth among placements of equal level.
const growthStep = 100
