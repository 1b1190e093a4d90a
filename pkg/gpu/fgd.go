package gpu

import "math"

// PolicyFGD is Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023):
// place a pod where the node's fragmentation (NodeGPUs.Fragment, measured
// against the workload's typical pods) grows least, and a share on the GPU
// where it grows least.
const PolicyFGD PolicyType = "FGD"

// Shapes supplies the typical pods a fragmentation-aware policy measures
// against. Typical must be safe for concurrent use.
type Shapes interface {
	Typical() []TypicalPod
}

// StaticShapes is a fixed set of typical pods.
type StaticShapes []TypicalPod

// Typical implements Shapes.
func (s StaticShapes) Typical() []TypicalPod { return s }

type fgd struct{ shapes Shapes }

// fgdHost is the CPU FGD checks typical pods against before and after the
// pod is placed; like the reference simulator, FGD leaves memory out.
func fgdHost(h *Host, d *Demand) (before, after hostFree) {
	before, after = h.free(), h.after(d)
	before.memoryMiB, after.memoryMiB = unlimited, unlimited
	return before, after
}

// Choose puts whole GPUs on the lowest free ones and a share on the GPU
// whose score (Score) is highest, the lowest such GPU on a tie.
func (p fgd) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return lowest(candidates, d.Count)
	}
	typical := p.shapes.Typical()
	free := freeOf(n)
	hostBefore, hostAfter := fgdHost(&h, d)
	before := n.fragmentOf(free[:n.Len()], hostBefore, typical)
	best, bestScore := -1, int64(-1)
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		free[i] -= d.Milli
		after := n.fragmentOf(free[:n.Len()], hostAfter, typical)
		free[i] += d.Milli
		if s := fgdScore(before, after); s > bestScore {
			best, bestScore = i, s
		}
	}
	return 1 << uint(best)
}

// Score: int(100 × sigmoid((F_before − F_after)/1000)), F the node's
// fragment in milli-GPU before and after placing the pod (its CPU and its
// milli-GPU on the chosen GPUs).
func (p fgd) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	typical := p.shapes.Typical()
	free := freeOf(n)
	hostBefore, hostAfter := fgdHost(&h, d)
	before := n.fragmentOf(free[:n.Len()], hostBefore, typical)
	for i := range n.Used {
		if chosen.Has(i) {
			free[i] -= d.Milli
		}
	}
	after := n.fragmentOf(free[:n.Len()], hostAfter, typical)
	return fgdScore(before, after) * refScale
}

// fgdScore is the reference's integer score, 0..100.
func fgdScore(before, after float64) int64 {
	return int64(100 / (1 + math.Exp(-(before-after)/1000)))
}

func freeOf(n *NodeGPUs) [MaxDevicesPerNode]int64 {
	var free [MaxDevicesPerNode]int64
	for i := range n.Used {
		free[i] = n.FreeMilli(i)
	}
	return free
}
