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

// NewFGD returns the FGD policy over the given typical pods.
func NewFGD(shapes Shapes) Policy { return fgd{shapes} }

type fgd struct{ shapes Shapes }

// ShapesOf returns the shapes a fragmentation-aware policy measures
// against, or nil for another policy.
func ShapesOf(p Policy) Shapes {
	switch f := p.(type) {
	case fgd:
		return f.shapes
	case fragFit:
		return f.shapes
	}
	return nil
}

// Choose is ChooseHost with the node's CPU taken as unlimited.
func (p fgd) Choose(n *NodeGPUs, d *Demand, candidates DeviceSet) DeviceSet {
	return p.ChooseHost(n, unlimitedCPU, d, candidates)
}

// unlimitedCPU is a Host for front ends that do not know the node's CPU.
var unlimitedCPU = Host{FreeMilliCPU: math.MaxInt64 / 2}

// ChooseHost puts whole GPUs on the lowest free ones and a share on the GPU
// whose score (ScoreHost) is highest, the lowest such GPU on a tie.
func (p fgd) ChooseHost(n *NodeGPUs, h Host, d *Demand, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return lowest(candidates, d.Count)
	}
	typical := p.shapes.Typical()
	free := freeOf(n)
	before := n.fragmentOf(free[:n.Len()], hostFree{h.FreeMilliCPU, unlimited}, typical)
	best, bestScore := -1, int64(-1)
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		free[i] -= d.Milli
		after := n.fragmentOf(free[:n.Len()], hostFree{h.FreeMilliCPU - d.MilliCPU, unlimited}, typical)
		free[i] += d.Milli
		if s := fgdScore(before, after); s > bestScore {
			best, bestScore = i, s
		}
	}
	return 1 << uint(best)
}

func (p fgd) Score(n *NodeGPUs, d *Demand, chosen DeviceSet) int64 {
	return p.ScoreHost(n, unlimitedCPU, d, chosen)
}

// ScoreHost: int(100 × sigmoid((F_before − F_after)/1000)), F the node's
// fragment in milli-GPU before and after placing the pod (its CPU and its
// milli-GPU on the chosen GPUs).
func (p fgd) ScoreHost(n *NodeGPUs, h Host, d *Demand, chosen DeviceSet) int64 {
	typical := p.shapes.Typical()
	free := freeOf(n)
	before := n.fragmentOf(free[:n.Len()], hostFree{h.FreeMilliCPU, unlimited}, typical)
	for i := range n.Used {
		if chosen.Has(i) {
			free[i] -= d.Milli
		}
	}
	after := n.fragmentOf(free[:n.Len()], hostFree{h.FreeMilliCPU - d.MilliCPU, unlimited}, typical)
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
