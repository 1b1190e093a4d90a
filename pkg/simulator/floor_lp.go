package simulator

import (
	"slices"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
)

// itemCounts counts the demands' items (gpu.Demand.PackingItems) by size.
// Sizes ascend.
func itemCounts(demands []gpu.Demand) (sizes, counts []int64) {
	byS := map[int64]int64{}
	for _, d := range demands {
		if size, n := d.PackingItems(); n > 0 {
			byS[size] += int64(n)
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
