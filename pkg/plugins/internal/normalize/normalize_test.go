package normalize

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestRescaleMinMax(t *testing.T) {
	tests := []struct {
		name string
		in   []int64
		want []int64
	}{
		// (500 − 200) × 100 / (800 − 200) = 50.
		{"spread over 0..100", []int64{200, 800, 500}, []int64{0, 100, 50}},
		// (3 − 1) × 100 / (4 − 1) = 66 (integer division).
		{"integer division rounds down", []int64{1, 3, 4}, []int64{0, 66, 100}},
		{"all equal: all the best", []int64{7, 7}, []int64{100, 100}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := make(fwk.NodeScoreList, len(tt.in))
			for i, s := range tt.in {
				list[i].Score = s
			}
			Rescale(list, gpu.RescaleMinMax)
			for i := range list {
				if list[i].Score != tt.want[i] {
					t.Errorf("score %d = %d, want %d", i, list[i].Score, tt.want[i])
				}
			}
		})
	}
}
