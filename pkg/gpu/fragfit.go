package gpu

import (
	"math"
	"slices"
)

// PolicyFragFit is gpusched's fragmentation-aware policy: FGD's measure with
// exact comparisons and best-fit to settle what fragmentation leaves equal.
// See docs/policies.md.
const PolicyFragFit PolicyType = "FragFit"

type fragFit struct {
	shapes Shapes
	// prices price the fleet's models by what the model-limited typical
	// pods need of them (pressure; none without such pods or a fleet).
	prices *priceCache
}

// Choose puts a share on the GPU whose use grows the node's fragment
// least, then the tightest such GPU, then the lowest; whole GPUs as BestFit
// places them, inside one interconnect group when it can.
func (p fragFit) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return chooseWhole(n, d.Count, candidates)
	}
	typical := p.shapes.Typical()
	free := freeOf(n)
	best, bestF, bestFree := -1, math.Inf(1), int64(0)
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		free[i] -= d.Milli
		f := n.fragmentOf(free[:n.Len()], h.after(d), typical)
		left := free[i]
		free[i] += d.Milli
		if f < bestF-fragEpsilon || (f < bestF+fragEpsilon && left < bestFree) {
			best, bestF, bestFree = i, f, left
		}
	}
	return 1 << uint(best)
}

// fragEpsilon is the difference in fragment (milli-GPU) below which two
// placements count as equal.
const fragEpsilon = 1e-6

// Score orders placements first by FGD's level of the fragment's change,
// int(100 × sigmoid((F_before − F_after)/1000)), with F counting a typical
// pod's host memory as well as its CPU, and F_after also the room the pod
// takes from model-limited typical pods (pressure × its milli-GPU); then,
// among equal levels, by the free GPU and CPU the node keeps, least first
// (best fit), each normalized by the largest node's: score = level << 20 +
// fit, fit in 0..2^20−1.
//
// The levels are coarse on purpose: ranking placements by the exact change
// in fragment does worse (greedy on a measure of the next pod only), and
// best-fit among near-equal placements packs what the measure cannot tell
// apart — pods without GPUs onto nodes whose GPUs are taken, whole GPUs onto
// the fullest nodes — instead of leaving it to the scheduler's tie-break.
func (p fragFit) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	typical := p.shapes.Typical()
	free := freeOf(n)
	before := n.fragmentOf(free[:n.Len()], h.free(), typical)
	var freeGPU int64
	for i := range n.Used {
		if chosen.Has(i) {
			free[i] -= d.Milli
		}
		freeGPU += free[i]
	}
	after := n.fragmentOf(free[:n.Len()], h.after(d), typical) + p.pressure(n, d, chosen)*float64(d.TotalMilli())
	return fgdScore(before, after)<<20 + fragFitFit(n, d, h, freeGPU)
}

// pressure is the mean pressure of the models of the GPUs d takes
// (sharePrices.pressure: the share of a class's limited typical items that
// would find it full, while the class is charged: pressedBy), 0 where no
// typical pod is limited to models or the fleet is not known. A pod that takes d.TotalMilli() of such GPUs strands
// pressure × that much for the model-limited pods: Score counts it in the
// fragment after the placement.
func (p fragFit) pressure(n *NodeGPUs, d *Demand, chosen DeviceSet) float64 {
	if p.prices == nil || p.prices.fleet == nil || d.TotalMilli() == 0 || chosen.Len() == 0 {
		return 0
	}
	typical := p.shapes.Typical()
	if !slices.ContainsFunc(typical, func(t TypicalPod) bool { return len(t.Demand.Models) > 0 }) {
		return 0 // no pod limited to models: no pressure, and no LP to price it
	}
	node := p.prices.pricesFor(typical).on(n)
	var pressed float64
	for i := range n.Used {
		if chosen.Has(i) {
			pressed += node.pressure(i)
		}
	}
	return pressed / float64(chosen.Len())
}

// fragFitFit is FragFit's fit term, 0..2^20−1: how little free CPU and
// GPU the node keeps once d is placed (freeGPU milli-GPU left), each
// normalized by the largest node's and weighed equally.
func fragFitFit(n *NodeGPUs, d *Demand, h Host, freeGPU int64) int64 {
	return fitOf(fragFitLeft(n, d, h, freeGPU))
}

// fragFitLeft is what the node keeps once d is placed: ½ of its free CPU
// and ½ of its free GPU, each normalized by the largest node's.
func fragFitLeft(n *NodeGPUs, d *Demand, h Host, freeGPU int64) float64 {
	_, maxGPU := h.maxima(n)
	return 0.5*max(0, h.cpuTerm(n, d.MilliCPU)) + 0.5*float64(freeGPU)/float64(maxGPU)
}

// fitOf is a fit term, 0..2^20−1, of what a node keeps (1 and more: 0).
func fitOf(left float64) int64 {
	return int64((1 - min(1, left)) * float64(1<<20-1))
}
