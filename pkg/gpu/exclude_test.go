package gpu_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// excludeSet excludes fixed positions on every node.
type excludeSet gpu.DeviceSet

func (e excludeSet) Excluded(string, *gpu.Inventory) (gpu.DeviceSet, string) {
	if e == 0 {
		return 0, ""
	}
	return gpu.DeviceSet(e), "excluded"
}

func TestPlaceExcluding(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("NVIDIA-A100-SXM4-80GB", 4, 81920).Obj()
	bestFit := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	tests := []struct {
		name        string
		demand      gpu.Demand
		used        []int // positions already taken whole
		excluded    gpu.Excluder
		wantChosen  gpu.DeviceSet
		wantReasons gpu.Reasons
		wantWhy     string
	}{
		{name: "nothing excluded: the lowest GPUs", demand: gpu.Demand{Count: 2, Milli: 1000}, excluded: excludeSet(0), wantChosen: 0b0011},
		{name: "nil excluder", demand: gpu.Demand{Count: 2, Milli: 1000}, wantChosen: 0b0011},
		{name: "excluded GPUs are passed over", demand: gpu.Demand{Count: 2, Milli: 1000}, excluded: excludeSet(0b0101), wantChosen: 0b1010},
		{name: "a share avoids them too", demand: gpu.Demand{Count: 1, Milli: 300}, excluded: excludeSet(0b0111), wantChosen: 0b1000},
		{name: "too few healthy free GPUs: why, no reasons", demand: gpu.Demand{Count: 3, Milli: 1000}, excluded: excludeSet(0b0011), wantWhy: "excluded"},
		{name: "too few free GPUs at all: the engine's reasons", demand: gpu.Demand{Count: 2, Milli: 1000}, used: []int{0, 1, 2},
			excluded: excludeSet(0b1000), wantReasons: gpu.Reasons(gpu.ReasonInsufficientGPUs)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pods []*gt.PodWrapper
			for i, pos := range tt.used {
				pods = append(pods, gt.MakeGPUPod("used-"+string(rune('a'+i))).UID("u"+string(rune('a'+i))).Node("n").
					Assigned(gpu.Assignment{Node: "n", Milli: 1000, Devices: []int{pos}}))
			}
			n := gpu.NewLedger().Node(node, 1, func(yield func(*v1.Pod) bool) {
				for _, p := range pods {
					if !yield(p.Obj()) {
						return
					}
				}
			})
			chosen, fit := bestFit.Place(n, &gpu.Request{Demand: &tt.demand, Exclude: tt.excluded})
			if chosen != tt.wantChosen || fit.Reasons != tt.wantReasons || fit.Excluded != tt.wantWhy {
				t.Errorf("chosen %04b reasons %q why %q, want %04b %q %q", chosen, fit.Reasons, fit.Excluded, tt.wantChosen, tt.wantReasons, tt.wantWhy)
			}
		})
	}
}
