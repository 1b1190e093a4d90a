// Package normalize holds the score normalization gpusched's plugins share.
package normalize

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// MinMax rescales scores in place to 0..fwk.MaxNodeScore, min-max over the
// list (gpu.Rescale): the highest gets MaxNodeScore, the lowest 0, and when
// all are equal all get MaxNodeScore. A plugin's preference then decides
// among the nodes however little they differ, in proportion to its weight.
func MinMax(scores fwk.NodeScoreList) {
	if len(scores) == 0 {
		return
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores[1:] {
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		scores[i].Score = gpu.Rescale(scores[i].Score, lo, hi, fwk.MaxNodeScore)
	}
}
