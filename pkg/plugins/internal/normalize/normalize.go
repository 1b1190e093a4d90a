// Package normalize rescales a plugin's engine scores to the framework's
// 0..MaxNodeScore with one of the engine's rescaling functions, so that a
// plugin and the extender rescale alike.
package normalize

import (
	fwk "k8s.io/kube-scheduler/framework"
)

// Rescale rescales scores in place to 0..fwk.MaxNodeScore with rescale,
// an engine function such as gpu.Policy.Rescale or gpu.RescaleMinMax.
func Rescale(scores fwk.NodeScoreList, rescale func(scores []int64, maxOut int64)) {
	if len(scores) == 0 {
		return
	}
	raw := make([]int64, len(scores))
	for i := range scores {
		raw[i] = scores[i].Score
	}
	rescale(raw, fwk.MaxNodeScore)
	for i := range scores {
		scores[i].Score = raw[i]
	}
}
