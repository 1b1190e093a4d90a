package simulator

import (
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Floor is how low the headline metric can go on one seed's workload: the
// pods that arrive until their GPU demand reaches the cluster's capacity,
// and how much of that capacity stays unallocated. Each measure holds for
// the placements it names, and only the bounds are floors; docs/simulator.md
// explains each.
type Floor struct {
	Seed int64 `json:"seed"`
	// AnyPlacementPct is a lower bound on the unallocated GPU % at arrived
	// 100% for every placement, online or offline, under every constraint:
	// the configuration LP's certificate (lpPackingBound) in LPWeights and
	// LPPerGPU.
	AnyPlacementPct float64 `json:"any_placement_pct"`
	// LPWeights is the certificate's weight per item size (milli-GPU, as a
	// string key; "1000" for each GPU of a whole-GPU pod), and LPPerGPU the
	// most weight one GPU holds: allocated ≤ LPPerGPU × GPUs + Σ(size −
	// weight).
	LPWeights map[string]float64 `json:"lp_weights"`
	LPPerGPU  float64            `json:"lp_per_gpu"`
	// PlaceEveryFitPct is a lower bound for the online placements that
	// never refuse a pod that fits, as kube-scheduler and the FGD protocol
	// place: the largest of the packing LP's bounds over the cases of the
	// first probe pod refused (onlineAllocationBound).
	PlaceEveryFitPct float64 `json:"place_every_fit_pct"`
	// LargeSharesPct is a lower bound for the placements that place every
	// share above 500 milli-GPU (as a scheduler that never refuses a pod
	// that fits does while there is room): such a share leaves 1000 − milli
	// free on its GPU that only smaller shares can fill. See
	// largeShareBound.
	LargeSharesPct float64 `json:"large_shares_pct"`
	// OfflineBFDPct is what offline best-fit-decreasing bin packing of the
	// same pods leaves: every pod known in advance, CPU, memory, GPU models
	// and node boundaries ignored. A heuristic packing, neither a bound nor
	// a placement the cluster allows. See offlineBestFitDecreasing.
	OfflineBFDPct float64 `json:"offline_bfd_pct"`
}

// workloadFloors computes the Floor of each seed's workload under the FGD
// arrival process; replay has departures, for which none of the measures
// holds.
func workloadFloors(opts Options, capacity int64) []Floor {
	if opts.Arrival == ArrivalReplay || capacity == 0 {
		return nil
	}
	floors := make([]*Floor, len(opts.Seeds))
	// The seeds' floors are independent: one at a time per CPU.
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(opts.Seeds)) {
		wg.Go(func() {
			for i := range next {
				floors[i] = seedFloor(opts, opts.Seeds[i], capacity)
			}
		})
	}
	for i := range opts.Seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	out := make([]Floor, 0, len(floors))
	for _, f := range floors {
		if f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// seedFloor is the Floor of one seed's workload; nil when the workload never
// reaches the cluster's capacity, so that there is no metric to bound.
func seedFloor(opts Options, seed, capacity int64) *Floor {
	var arrived []arrivedPod
	var total int64
	for _, p := range fgdSequence(opts.Pods, seed, capacity) {
		d, err := gpu.DemandFromPod(p.Pod)
		if err != nil || d.TotalMilli() == 0 {
			continue
		}
		if total+d.TotalMilli() > capacity {
			break
		}
		total += d.TotalMilli()
		arrived = append(arrived, arrivedPod{demand: d, milliCPU: gpu.PodMilliCPU(p.Pod), memoryMiB: gpu.PodMemoryMiB(p.Pod)})
	}
	if total*100 < capacity*99 {
		return nil
	}
	demands := demandsOf(arrived)
	gpus := capacity / gpu.MilliPerGPU
	pct := func(unallocated float64) float64 { return round2(100 * unallocated / float64(capacity)) }
	f := &Floor{
		Seed:             seed,
		LargeSharesPct:   pct(float64(largeShareBound(demands))),
		OfflineBFDPct:    pct(float64(capacity - offlineBestFitDecreasing(demands, gpus))),
		PlaceEveryFitPct: pct(float64(capacity) - onlineAllocationBound(arrived, gpus)),
	}
	if cert, err := lpPackingBound(demands, gpus); err == nil {
		f.AnyPlacementPct = pct(float64(capacity) - cert.AllocatedMilli)
		f.LPPerGPU = cert.PerGPU
		f.LPWeights = map[string]float64{}
		for size, w := range cert.Weights {
			f.LPWeights[strconv.FormatInt(size, 10)] = math.Round(w*100) / 100
		}
	}
	return f
}

// largeShareBound is the milli-GPU that stays free once the demands are
// placed, in every placement that places each share of more than 500
// milli-GPU: for any t below 500, a GPU holding a share of at least 1000 − t
// holds no other share above t (two such shares would not fit), so the
// 1000 − milli it leaves free can only be filled by the shares of at most t,
// and at least Σ(1000 − milli) − Σ(shares ≤ t) stays free. The bound is the
// largest over t.
//
// Example: 10 shares of 810 and 3 of 160. t = 190: 10 × 190 − 3 × 160 = 1420
// milli-GPU stay free, however the 160s are placed.
func largeShareBound(demands []gpu.Demand) int64 {
	var shares []int64
	for _, d := range demands {
		if d.IsShare() {
			shares = append(shares, d.Milli)
		}
	}
	slices.Sort(shares)
	var best int64
	for i := len(shares) - 1; i >= 0 && shares[i] > gpu.MilliPerGPU/2; i-- {
		if i+1 < len(shares) && shares[i+1] == shares[i] {
			continue // the same t as the previous share
		}
		t := gpu.MilliPerGPU - shares[i] // the gap of the smallest share counted
		var gaps, fill int64
		for _, s := range shares {
			switch {
			case s >= gpu.MilliPerGPU-t:
				gaps += gpu.MilliPerGPU - s
			case s <= t:
				fill += s
			}
		}
		best = max(best, gaps-fill)
	}
	return best
}

// offlineBestFitDecreasing packs the demands into gpus GPUs and returns the
// milli-GPU placed: whole GPUs first (a pod's GPUs anywhere), then the shares,
// largest first, each on the GPU it fits most tightly, a fresh GPU when none
// fits; a demand that finds no room is left out.
func offlineBestFitDecreasing(demands []gpu.Demand, gpus int64) int64 {
	var placed int64
	var shares []int64
	for _, d := range demands {
		switch {
		case d.IsShare():
			shares = append(shares, d.Milli)
		case int64(d.Count) <= gpus:
			gpus -= int64(d.Count)
			placed += d.TotalMilli()
		}
	}
	slices.SortFunc(shares, func(a, b int64) int { return int(b - a) })
	var free []int64 // free milli of the GPUs holding shares, ascending
	for _, s := range shares {
		i, _ := slices.BinarySearch(free, s)
		switch {
		case i < len(free):
			left := free[i] - s
			free = slices.Delete(free, i, i+1)
			j, _ := slices.BinarySearch(free, left)
			free = slices.Insert(free, j, left)
		case gpus > 0:
			gpus--
			left := gpu.MilliPerGPU - s
			j, _ := slices.BinarySearch(free, left)
			free = slices.Insert(free, j, left)
		default:
			continue
		}
		placed += s
	}
	return placed
}
