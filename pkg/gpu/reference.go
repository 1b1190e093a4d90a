package gpu

import (
	"encoding/binary"
	"hash/fnv"
)

// The reference policies of the FGD paper's evaluation (Weng et al., USENIX
// ATC 2023), scored as its simulator scores them: an integer 0..100 per node,
// scaled here to 0..MaxScore, so that the same nodes tie and the scheduler's
// random tie-break sees the same choices. They let a cluster's operators
// compare gpusched's policies with the published baselines on their own
// workload (see docs/simulator.md).
const (
	// PolicyRandom puts a pod on a pseudo-random feasible node (each node
	// scores a hash of its name and state) and a share on a pseudo-random
	// fitting GPU.
	PolicyRandom PolicyType = "Random"
	// PolicyDotProd aligns the pod's request with the node's free resources,
	// Tetris-style: 100 × (1 − ⟨free, request⟩ / 2) over CPU and GPU, each
	// normalized by the largest node's capacity.
	PolicyDotProd PolicyType = "DotProd"
	// PolicyGpuClustering keeps pods of one class (a share, 1, 2, 4, 8 GPUs)
	// together: nodes holding only that class first, then mixed nodes holding
	// it, then nodes without GPU pods, then the rest; fuller nodes first.
	PolicyGpuClustering PolicyType = "GpuClustering"
	// PolicyGpuPacking fills partly used GPUs first, then free GPUs of nodes
	// already in use, then idle nodes.
	PolicyGpuPacking PolicyType = "GpuPacking"
	// PolicyBestFitCPUGPU is the paper's BestFit: the node left with the
	// least free CPU and GPU, each normalized by the largest node's capacity:
	// 100 × (1 − ½·(freeCPU − cpu)/maxCPU − ½·(freeGPU − gpu)/maxGPU).
	PolicyBestFitCPUGPU PolicyType = "BestFitCPUGPU"
)

// free is what typical pods are checked against on the node: its CPU and
// memory, unlimited when unknown.
func (h Host) free() hostFree {
	if !h.Known {
		return hostFree{unlimited, unlimited}
	}
	return hostFree{h.FreeMilliCPU, h.FreeMemoryMiB}
}

// after is free once d is placed.
func (h Host) after(d *Demand) hostFree {
	hf := h.free()
	if h.Known {
		hf.milliCPU -= d.MilliCPU
		hf.memoryMiB -= d.HostMemoryMiB
	}
	return hf
}

// cpuTerm is (free CPU − cpu) / the largest node's CPU, the CPU term of the
// scores that weigh it: 0 when the host is unknown.
func (h Host) cpuTerm(n *NodeGPUs, cpu int64) float64 {
	if !h.Known {
		return 0
	}
	maxCPU, _ := h.maxima(n)
	return float64(h.FreeMilliCPU-cpu) / float64(maxCPU)
}

// refScale turns a reference score in 0..100 into 0..MaxScore.
const refScale = MaxScore / 100

// maxima fills in a Host's normalizing capacities from the node itself.
func (h Host) maxima(n *NodeGPUs) (cpu, gpuMilli int64) {
	cpu, gpus := h.MaxMilliCPU, h.MaxGPUs
	if gpus <= 0 {
		gpus = n.Len()
	}
	return max(cpu, 1), max(int64(gpus)*MilliPerGPU, 1)
}

// referencePolicy gives the reference policies their GPU choice: the fitting
// GPU with the least free milli-GPU for a share, the lowest free GPUs for
// whole GPUs.
type referencePolicy struct{}

func (referencePolicy) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if d.IsShare() {
		return chooseShare(n, candidates, true)
	}
	return lowest(candidates, d.Count)
}

type randomPolicy struct{}

// stateHash mixes a node's name and some numbers into a pseudo-random
// value: FNV-1a, then a finalizer so that nearby inputs scatter. The same
// inputs give the same value in every process, so runs are reproducible.
func stateHash(name string, xs ...int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	var buf [8]byte
	for _, x := range xs {
		binary.LittleEndian.PutUint64(buf[:], uint64(x))
		h.Write(buf[:])
	}
	z := h.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Choose picks a share's GPU among the candidates by a hash of the node's
// state, so repeated runs over the same cluster make the same choices.
func (randomPolicy) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if !d.IsShare() {
		return lowest(candidates, d.Count)
	}
	k := int(stateHash(n.Name, n.usedMilli, d.Milli) % uint64(candidates.Len()))
	for i := range n.Used {
		if candidates.Has(i) {
			if k == 0 {
				return 1 << uint(i)
			}
			k--
		}
	}
	return 0
}

// Score is a pseudo-random score from a hash of the node and its state:
// the best-scored node is a uniformly random one, whatever the scheduler's
// tie-break, and it changes as the cluster does.
func (randomPolicy) Score(n *NodeGPUs, d *Demand, h Host, _ DeviceSet) int64 {
	return int64(stateHash(n.Name, n.usedMilli, h.FreeMilliCPU, d.Milli, d.MilliCPU) % uint64(MaxScore+1))
}

type dotProd struct{ referencePolicy }

// Score: int(100 × (1 − (freeCPU·cpu/maxCPU² + freeGPU·gpu/maxGPU²)/2)),
// free amounts before placing the pod; the CPU term is 0 when the host is
// unknown.
func (dotProd) Score(n *NodeGPUs, d *Demand, h Host, _ DeviceSet) int64 {
	maxCPU, maxGPU := h.maxima(n)
	cpu := h.cpuTerm(n, 0) * float64(d.MilliCPU) / float64(maxCPU)
	gpu := float64(n.FreeMilliTotal()) / float64(maxGPU) * float64(d.TotalMilli()) / float64(maxGPU)
	return int64(100*(1-(cpu+gpu)/2)) * refScale
}

type bestFitCPUGPU struct{ referencePolicy }

// Score: int(100 × (1 − ½·(freeCPU − cpu)/maxCPU − ½·(freeGPU − gpu)/maxGPU));
// the CPU term is 0 when the host is unknown.
func (bestFitCPUGPU) Score(n *NodeGPUs, d *Demand, h Host, _ DeviceSet) int64 {
	_, maxGPU := h.maxima(n)
	left := 0.5*h.cpuTerm(n, d.MilliCPU) +
		0.5*float64(n.FreeMilliTotal()-d.TotalMilli())/float64(maxGPU)
	return int64((1-left)*100) * refScale
}

type gpuPacking struct{ referencePolicy }

// Score: a node whose GPUs are all free scores 33 − GPUs; one where the pod
// takes k > 0 fully free GPUs scores max(50 − k, 33); a pod placed only on
// partly used GPUs scores max(100 − Σ free%/10, 50), Σ over the chosen GPUs
// of their free milli-GPU in percent.
func (gpuPacking) Score(n *NodeGPUs, _ *Demand, _ Host, chosen DeviceSet) int64 {
	if n.usedMilli == 0 {
		return int64(33-n.Len()) * refScale
	}
	var whole, freePct int64
	for i := range n.Used {
		if !chosen.Has(i) {
			continue
		}
		free := n.FreeMilli(i)
		if free == MilliPerGPU {
			whole++
		}
		freePct += free * 100 / MilliPerGPU
	}
	if whole > 0 {
		return max(50-whole, 33) * refScale
	}
	return max(100-freePct/10, 50) * refScale
}

type gpuClustering struct{ referencePolicy }

// Score: band + 25 × (8000 − freeGPU)/8000, band 75 when the node holds only
// pods of the pod's class, 50 when it holds that class and others, 25 when
// it holds no GPU pods, else 0.
func (gpuClustering) Score(n *NodeGPUs, d *Demand, h Host, _ DeviceSet) int64 {
	class := ClassOf(d.Milli, d.Count)
	var band int64
	switch same, other := n.PodsOfClass(class) > 0, n.HasOtherClasses(class); {
	case same && !other:
		band = 75
	case same:
		band = 50
	case !other:
		band = 25
	}
	const full = 8 * MilliPerGPU
	return (band + 25*(full-n.FreeMilliTotal())/full) * refScale
}
