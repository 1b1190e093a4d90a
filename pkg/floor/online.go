package floor

import (
	"container/heap"
	"math"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
)

// arrivedPod is a pod of a workload's arrival sequence as the online floor
// reads it: its GPU demand and host requests.
type arrivedPod struct {
	demand    gpu.Demand
	milliCPU  int64
	memoryMiB int64
}

// The probes of the online floor: one whole GPU of any model, at most 8
// CPUs and 32 GiB. Such pods are common in GPU workloads, and once one is
// refused, most later whole-GPU pods are too.
const (
	probeMaxMilliCPU  = 8000
	probeMaxMemoryMiB = 32 << 10
)

func (p *arrivedPod) isProbe() bool {
	d := &p.demand
	return d.Count == 1 && d.Milli == gpu.MilliPerGPU && len(d.Models) == 0 && d.MemoryMiB == 0 &&
		p.milliCPU <= probeMaxMilliCPU && p.memoryMiB <= probeMaxMemoryMiB
}

// dominates reports whether p asks for at least q's CPU and memory.
func (p *arrivedPod) dominates(q *arrivedPod) bool {
	return p.milliCPU >= q.milliCPU && p.memoryMiB >= q.memoryMiB
}

// onlineAllocationBound is an upper bound on the milli-GPU allocated at the
// end of the sequence by any online placement that never refuses a pod
// that fits, with no pod leaving (the FGD protocol). The argument, by the
// first probe K the placement refuses (or none):
//
//   - a pod that asks for one GPU (whole or a share), of any model, with no
//     GPU memory, and at most the CPU and memory of a probe k' placed after
//     it (k' < K), fitted when it arrived: k' found a free GPU with that
//     much CPU and memory later, and nothing frees up in between. So it was
//     placed;
//   - every whole-GPU pod after K that asks for at least K's CPU and memory
//     was refused: when K arrived no node had a free GPU with that much CPU
//     and memory, and nothing frees up after.
//
// Each case bounds the allocation by the packing LP with those items forced
// in and out (packing.LP.Bound), and the placement is in one of the
// cases, so the largest case bounds it. The cases are searched branch and
// bound over intervals of K, each interval bounded by the LP with the items
// forced in at its first K and out for every K in it.
func onlineAllocationBound(pods []arrivedPod, models gpu.ModelGPUs) float64 {
	var probes []int // positions of the probes
	for i := range pods {
		if pods[i].isProbe() {
			probes = append(probes, i)
		}
	}
	// placedBy[t] is the position of the first probe at or after t that
	// dominates pod t, when t asks for one GPU without model or memory;
	// len(pods) when none does.
	never := len(pods)
	placedBy := make([]int, len(pods))
	for t := range pods {
		placedBy[t] = never
		d := &pods[t].demand
		if d.Count != 1 || len(d.Models) != 0 || d.MemoryMiB != 0 {
			continue
		}
		for _, k := range probes {
			if k >= t && pods[k].dominates(&pods[t]) {
				placedBy[t] = k
				break
			}
		}
	}
	items := gpu.NewModelItems(models, demandsOf(pods), nil)
	available := items.Counts()
	lp := packing.NewLP(items.Kinds, len(items.ClassGPUs))
	// bound is the LP's bound when the items placedBy before first are in,
	// and the whole-GPU pods after last asking for at least (cpu, memory)
	// are out, with the pod at out (if any) out too.
	bound := func(first, last int, cpu, memory int64, out int) float64 {
		lower := make([]int64, len(items.Kinds))
		upper := append([]int64(nil), available...)
		for t := range pods {
			d := &pods[t].demand
			kind, n, _ := items.KindOf(d)
			if n == 0 {
				continue
			}
			switch {
			case t == out || (t > last && !d.IsShare() && pods[t].milliCPU >= cpu && pods[t].memoryMiB >= memory):
				upper[kind] -= int64(n)
			case placedBy[t] < first:
				lower[kind] += int64(n)
			}
		}
		return lp.Bound(lower, upper, items.ClassGPUs)
	}
	// The case where no probe is refused.
	best := bound(never, never, 0, 0, -1)
	if len(probes) == 0 {
		return best
	}
	// Intervals of probes [lo, hi], by their bound.
	span := func(lo, hi int) *interval {
		var cpu, memory int64
		for _, k := range probes[lo : hi+1] {
			cpu, memory = max(cpu, pods[k].milliCPU), max(memory, pods[k].memoryMiB)
		}
		out := -1
		if lo == hi {
			out = probes[lo]
		}
		return &interval{lo: lo, hi: hi, bound: bound(probes[lo], probes[hi], cpu, memory, out)}
	}
	queue := &intervals{span(0, len(probes)-1)}
	const maxLPs = 400 // past it, the largest bound left stands: still valid
	for lps := 0; queue.Len() > 0 && lps < maxLPs; lps += 2 {
		top := heap.Pop(queue).(*interval)
		if top.bound <= best {
			return best // no interval left can beat the best exact case
		}
		if top.lo == top.hi {
			return top.bound // exact, and the largest left
		}
		mid := (top.lo + top.hi) / 2
		heap.Push(queue, span(top.lo, mid))
		heap.Push(queue, span(mid+1, top.hi))
	}
	if queue.Len() > 0 {
		best = math.Max(best, (*queue)[0].bound)
	}
	return best
}

func demandsOf(pods []arrivedPod) []gpu.Demand {
	out := make([]gpu.Demand, len(pods))
	for i := range pods {
		out[i] = pods[i].demand
	}
	return out
}

// interval is a range of the probes' indices with the LP bound on every
// case in it.
type interval struct {
	lo, hi int
	bound  float64
}

// intervals is a max-heap of intervals by bound.
type intervals []*interval

func (h intervals) Len() int           { return len(h) }
func (h intervals) Less(i, j int) bool { return h[i].bound > h[j].bound }
func (h intervals) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intervals) Push(x any)        { *h = append(*h, x.(*interval)) }
func (h *intervals) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
