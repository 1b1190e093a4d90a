package simulator

import (
	"slices"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
)

// itemCounts counts the demands' items by size: a share is one item of
// its milli-GPU, a pod of n whole GPUs n items of 1000. Sizes ascend.
func itemCounts(demands []gpu.Demand) (sizes, counts []int64) {
	byS := map[int64]int64{}
	for _, d := range demands {
		switch {
		case d.IsShare():
			byS[d.Milli]++
		case d.Count > 0:
			byS[gpu.MilliPerGPU] += int64(d.Count)
		}
	}
	for s := range byS {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		counts = append(counts, byS[s])
	}
	return sizes, counts
}

// lpPackingBound is packing.Bound for demands' items on gpus GPUs.
func lpPackingBound(demands []gpu.Demand, gpus int64) (packing.Certificate, error) {
	sizes, counts := itemCounts(demands)
	return packing.Bound(sizes, counts, gpus)
}
