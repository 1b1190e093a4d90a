package gpu_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestPlaceAndScoreRemembers: PlaceAndScore, which remembers its answers
// with the node's view, answers as Place and Score do afresh, asked again
// and again while views change under it (With, Without: the changed view
// shares nothing remembered with the one it came from), with other hosts,
// by three policies about the same views, and after the policy's typical pods
// change (a ShapeWindow that learns).
func TestPlaceAndScoreRemembers(t *testing.T) {
	window := gpu.NewShapeWindow(4, halfWholeHalfShare) // recomputed every 64 pods observed
	fragFit := gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: window})
	fgd := gpu.MustPolicy(gpu.PolicyFGD, gpu.PolicyConfig{Shapes: window})
	pairFit := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: window})
	demands := []gpu.Demand{
		{Count: 1, Milli: 500, MilliCPU: 4000},
		{Count: 1, Milli: 250, MilliCPU: 4000},
		{Count: 1, Milli: 250, MilliCPU: 8000, HostMemoryMiB: 1024},
		{Count: 2, Milli: 1000, MilliCPU: 2000},
		{Count: 1, Milli: 700, Models: []string{"T4"}},
		{MilliCPU: 1000},
	}
	hosts := []gpu.Host{knownHost(16000), knownHost(6000), {}}
	for i := range hosts {
		hosts[i].MaxMilliCPU, hosts[i].MaxGPUs = 32000, 8
	}
	// Each step asks about one view by every policy and host, and last
	// again as first, so that the next view, if it shared what this one
	// remembers, would be answered from it.
	type asker struct {
		name   string
		policy *gpu.Policy
		host   gpu.Host
	}
	var askers []asker
	for _, h := range hosts {
		askers = append(askers, asker{"FragFit", fragFit, h}, asker{"FGD", fgd, h}, asker{"PairFit", pairFit, h})
	}
	askers = append(askers, askers[0])
	view := nodeWithPods(t, gt.MakeGPUNode("n").GFD("T4", 4, 0))
	var placed []gpu.Assignment
	for step := range 40 {
		for _, a := range askers {
			for _, d := range demands {
				req := gpu.Request{Demand: &d, Host: a.host}
				wantChosen, wantFit := a.policy.Place(view, &req)
				var wantScore int64
				if wantFit.OK() {
					wantScore = a.policy.Score(view, &req, wantChosen)
				}
				for range 2 { // the second answer is remembered
					chosen, fit, score := a.policy.PlaceAndScore(view, &req)
					if chosen != wantChosen || fit != wantFit || score != wantScore {
						t.Fatalf("step %d, %s, host %+v, demand %v: PlaceAndScore = (%v, %+v, %d), want (%v, %+v, %d)",
							step, a.name, a.host, d.String(), chosen, fit, score, wantChosen, wantFit, wantScore)
					}
				}
			}
		}
		switch {
		case step%10 == 9:
			// Keep the view; teach the window shapes until it recomputes
			// its typical pods.
			for i := range 64 {
				window.ObservePod(types.UID(fmt.Sprint(step, "-", i)), gpu.Demand{Count: 1, Milli: int64(100 * (1 + step/10))})
			}
		case step%3 == 2 && len(placed) > 0:
			// Take back the oldest pod.
			view, placed = view.Without(&placed[0]), placed[1:]
		default:
			// Place a share.
			d := &demands[step%2]
			req := gpu.Request{Demand: d}
			if chosen, fit := fragFit.Place(view, &req); fit.OK() {
				a := gpu.Assignment{Node: "n", Devices: devicesOf(chosen), Milli: d.Milli}
				view, placed = view.With(&a), append(placed, a)
			}
		}
	}
}

func devicesOf(s gpu.DeviceSet) []int {
	var out []int
	for i := range 64 {
		if s.Has(i) {
			out = append(out, i)
		}
	}
	return out
}
