package gpu

import "slices"

// RescaleMinMax maps scores, in place, to 0..maxOut, min-max over the
// list: the highest gets maxOut, the lowest 0, so that the policy's
// preference decides among nodes even when their scores differ little.
// When every score is the same, each gets maxOut.
//
// Policy.Rescale calls it for policies whose scores are magnitudes; the
// GPUTelemetry plugin rescales its own scores with it.
func RescaleMinMax(scores []int64, maxOut int64) {
	if len(scores) == 0 {
		return
	}
	lo, hi := slices.Min(scores), slices.Max(scores)
	for i, s := range scores {
		if hi <= lo {
			scores[i] = maxOut
			continue
		}
		scores[i] = (s - lo) * maxOut / (hi - lo)
	}
}

// RescaleByRank maps scores, in place, by rank: the highest distinct score
// gets maxOut, the next maxOut−1, and so on down to 0. Equal scores stay
// equal, and the order of up to maxOut+1 distinct scores survives.
func RescaleByRank(scores []int64, maxOut int64) {
	distinct := slices.Clone(scores)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	for i, s := range scores {
		rank, _ := slices.BinarySearch(distinct, s)
		scores[i] = max(0, maxOut-int64(len(distinct)-1-rank))
	}
}
