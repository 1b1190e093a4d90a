package floor

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/trace"
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
	// the configuration LP's certificate (lpPackingBound) in LPWeights,
	// LPPerGPU and LPClasses.
	AnyPlacementPct float64 `json:"any_placement_pct"`
	// ModelsCounted is set when some pods are limited to some of the
	// cluster's GPU models, which the LP then counts.
	ModelsCounted bool `json:"models_counted,omitempty"`
	// LPWeights is the certificate's weight per kind of item: its size
	// (milli-GPU; "1000" for each GPU of a whole-GPU pod), followed by
	// " on " and its models when it is limited to some. LPPerGPU is the most
	// weight one GPU holds, of any class: with one class, allocated ≤
	// LPPerGPU × GPUs + Σ(size − weight).
	LPWeights map[string]float64 `json:"lp_weights"`
	LPPerGPU  float64            `json:"lp_per_gpu"`
	// LPClasses are the classes of GPUs when models are counted:
	// allocated ≤ Σ over the classes of PerGPU × GPUs + Σ(size − weight).
	LPClasses []LPClass `json:"lp_classes,omitempty"`
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
	// same pods leaves: every pod known in advance and on its GPU models,
	// CPU, memory and node boundaries ignored. A heuristic packing, neither
	// a bound nor a placement the cluster allows. See
	// offlineBestFitDecreasing.
	OfflineBFDPct float64 `json:"offline_bfd_pct"`
}

// LPClass is a class of GPUs in the LP's certificate: models that the same
// kinds of items may use, their GPUs, and the most weight one of them holds.
type LPClass struct {
	Models []string `json:"models"`
	GPUs   int64    `json:"gpus"`
	PerGPU float64  `json:"per_gpu"`
}

// Of computes the Floor of each seed's workload: the pods in the order
// the FGD arrival process submits them for the seed (trace.FGDSequence) on
// the nodes. It holds for that process alone: under replay arrival pods
// leave, and none of the measures holds. Seeds whose workload never reaches
// the cluster's capacity have no Floor; a cluster without GPUs has none.
func Of(nodes []*v1.Node, pods []trace.Pod, seeds []int64) []Floor {
	capacity := trace.CapacityMilli(nodes)
	if capacity == 0 {
		return nil
	}
	floors := make([]*Floor, len(seeds))
	models := ModelGPUsOf(nodes)
	// The seeds' floors are independent: one at a time per CPU.
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(seeds)) {
		wg.Go(func() {
			for i := range next {
				floors[i] = seedFloor(pods, seeds[i], capacity, models)
			}
		})
	}
	for i := range seeds {
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

// ArrivedDemands is the GPU demands the floors of a seed bound: those of
// the GPU pods the FGD arrival process submits for the seed
// (trace.FGDSequence) until the next would pass the cluster's capacity
// (capacityMilli), in arrival order.
func ArrivedDemands(pods []trace.Pod, seed, capacityMilli int64) []gpu.Demand {
	arrived, _ := arrivedAt100(pods, seed, capacityMilli)
	return demandsOf(arrived)
}

// arrivedAt100 is ArrivedDemands' pods with their CPU and memory, and the
// milli-GPU they ask in all.
func arrivedAt100(pods []trace.Pod, seed, capacity int64) (arrived []arrivedPod, total int64) {
	for _, p := range trace.FGDSequence(pods, seed, capacity) {
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
	return arrived, total
}

// seedFloor is the Floor of one seed's workload; nil when the workload never
// reaches the cluster's capacity, so that there is no metric to bound.
func seedFloor(pods []trace.Pod, seed, capacity int64, models gpu.ModelGPUs) *Floor {
	arrived, total := arrivedAt100(pods, seed, capacity)
	if total*100 < capacity*99 {
		return nil
	}
	demands := demandsOf(arrived)
	pct := func(unallocated float64) float64 { return round2(100 * unallocated / float64(capacity)) }
	f := &Floor{
		Seed:             seed,
		LargeSharesPct:   pct(float64(largeShareBound(demands))),
		OfflineBFDPct:    pct(float64(capacity - offlineBestFitDecreasing(demands, models))),
		PlaceEveryFitPct: pct(float64(capacity) - onlineAllocationBound(arrived, models)),
	}
	if items, cert, err := lpPackingBound(demands, models); err == nil {
		f.AnyPlacementPct = pct(float64(capacity) - cert.AllocatedMilli)
		f.ModelsCounted = items.ModelsCounted()
		f.LPWeights = map[string]float64{}
		for i, w := range cert.Weights {
			f.LPWeights[items.Labels[i]] = round2(w)
		}
		for c, perGPU := range cert.PerGPU {
			f.LPPerGPU = max(f.LPPerGPU, perGPU)
			if f.ModelsCounted {
				f.LPClasses = append(f.LPClasses, LPClass{Models: items.ClassModels[c], GPUs: items.ClassGPUs[c], PerGPU: round2(perGPU)})
			}
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

// offlineBestFitDecreasing packs the demands onto the cluster's GPUs, each
// on its models, and returns the milli-GPU placed. The pods limited to
// models go first, those with the fewest GPUs to choose from first, then
// the others; within each, whole GPUs first (a pod's GPUs anywhere on its
// models), then the shares, largest first, each on the GPU of its models it
// fits most tightly, or else an idle one of the model with the most idle
// GPUs. A demand that finds no room is left out.
func offlineBestFitDecreasing(demands []gpu.Demand, models gpu.ModelGPUs) int64 {
	idle := make([]int64, len(models))
	var partial [][]int64 // per model, the free milli of its GPUs holding shares, ascending
	for m := range models {
		idle[m] = models[m].GPUs
		partial = append(partial, nil)
	}
	type item struct {
		demand  gpu.Demand
		allowed []int // model indices
		choice  int64 // the GPUs of those models
	}
	items := make([]item, 0, len(demands))
	for _, d := range demands {
		it := item{demand: d}
		for m := range models {
			if d.AllowsModel(models[m].Model) {
				it.allowed = append(it.allowed, m)
				it.choice += models[m].GPUs
			}
		}
		if len(d.Models) == 0 {
			it.choice = math.MaxInt64 // unlimited pods go last
		}
		items = append(items, it)
	}
	slices.SortStableFunc(items, func(a, b item) int {
		switch {
		case a.choice != b.choice:
			return cmp.Compare(a.choice, b.choice)
		case a.demand.IsShare() != b.demand.IsShare():
			return cmp.Compare(b2i(a.demand.IsShare()), b2i(b.demand.IsShare()))
		}
		return cmp.Compare(b.demand.Milli, a.demand.Milli)
	})
	mostIdle := func(allowed []int) int {
		best := -1
		for _, m := range allowed {
			if idle[m] > 0 && (best < 0 || idle[m] > idle[best]) {
				best = m
			}
		}
		return best
	}
	var placed int64
	for _, it := range items {
		d := it.demand
		if !d.IsShare() {
			var free int64
			for _, m := range it.allowed {
				free += idle[m]
			}
			if free < int64(d.Count) {
				continue
			}
			for left := int64(d.Count); left > 0; {
				m := mostIdle(it.allowed)
				take := min(left, idle[m])
				idle[m] -= take
				left -= take
			}
			placed += d.TotalMilli()
			continue
		}
		bestModel, bestIndex := -1, -1
		for _, m := range it.allowed {
			if i, _ := slices.BinarySearch(partial[m], d.Milli); i < len(partial[m]) &&
				(bestModel < 0 || partial[m][i] < partial[bestModel][bestIndex]) {
				bestModel, bestIndex = m, i
			}
		}
		var left int64
		switch {
		case bestModel >= 0:
			left = partial[bestModel][bestIndex] - d.Milli
			partial[bestModel] = slices.Delete(partial[bestModel], bestIndex, bestIndex+1)
		default:
			if bestModel = mostIdle(it.allowed); bestModel < 0 {
				continue
			}
			idle[bestModel]--
			left = gpu.MilliPerGPU - d.Milli
		}
		j, _ := slices.BinarySearch(partial[bestModel], left)
		partial[bestModel] = slices.Insert(partial[bestModel], j, left)
		placed += d.Milli
	}
	return placed
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// round2 rounds to two decimals, half to even, as the reports do.
func round2(x float64) float64 { return math.RoundToEven(x*100) / 100 }
