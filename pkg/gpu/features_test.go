package gpu_test

import (
	"math"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestExternalPolicyFeatureRow: a node's row of FeatureColumns, the matrix
// the policy service and the environment both carry, column by column.
func TestExternalPolicyFeatureRow(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("T4", 2, 15360)
	n := nodeWithPods(t, node, gpu.Assignment{Devices: []int{0}, Milli: 500})
	// The largest node: 16 CPUs, 4 GPUs (4000 milli-GPU). This one: 8 CPUs
	// and 16 GiB free of 32 GiB, GPU 0 half used.
	host := gpu.Host{Known: true, FreeMilliCPU: 8000, FreeMemoryMiB: 16384, MaxMilliCPU: 16000, MaxGPUs: 4}
	share := gpu.Demand{Count: 1, Milli: 500, MilliCPU: 2000, HostMemoryMiB: 4096}
	// FragFit against half whole GPUs, half 500-milli shares (no CPU):
	// before, GPU 0's 500 free cannot hold a whole GPU: ½·500 = 250; after
	// the share fills GPU 0 (its best fit), nothing is stranded: 0.
	p := gpu.MustPolicy(gpu.PolicyFragFit, gpu.PolicyConfig{Shapes: halfWholeHalfShare})
	req := gpu.Request{Demand: &share, Host: host}
	chosen, fit := p.Place(n, &req)
	if !fit.OK() || chosen != 1 {
		t.Fatalf("FragFit chose %b (%v), want GPU 0", chosen, fit.Reasons)
	}
	columns := gpu.FeatureColumns()
	tests := []struct {
		name string
		fits bool
		want map[string]float64 // every column not named is 0
	}{
		{"fits", true, map[string]float64{
			"builtin_score":     0.75,          // as given
			"fits":              1,             //
			"free_cpu":          0.5,           // 8000/16000
			"free_cpu_after":    0.375,         // 6000/16000
			"free_memory":       0.5,           // 16384/32768
			"free_memory_after": 0.375,         // 12288/32768
			"gpus":              0.5,           // 2/4
			"free_gpu":          0.375,         // 1500/4000
			"free_gpu_after":    0.25,          // 1000/4000
			"idle_gpus":         0.25,          // GPU 1, of 4
			"idle_gpus_after":   0.25,          //
			"partial_gpus":      0.25,          // GPU 0
			"chosen_groups":     0.25,          // one group, of 4
			"fragment":          250.0 / 4000,  // F 250, of 4000
			"fragment_delta":    -250.0 / 1000, // (0 − 250)/1000
		}},
		{"does not fit: the node's state only", false, map[string]float64{
			"free_cpu": 0.5, "free_memory": 0.5, "gpus": 0.5, "free_gpu": 0.375,
			"idle_gpus": 0.25, "partial_gpus": 0.25, "fragment": 250.0 / 4000,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := p.Features(n, &req, tt.fits, chosen, 0.75, 32000, 32768)
			row := f.AppendRow(nil, &share)
			if len(row) != len(columns) {
				t.Fatalf("%d values for %d columns", len(row), len(columns))
			}
			for i, c := range columns {
				if want := tt.want[c]; math.Abs(float64(row[i])-want) > 1e-6 {
					t.Errorf("%s = %v, want %v", c, row[i], want)
				}
			}
			for c := range tt.want {
				if !slices.Contains(columns, c) {
					t.Errorf("no column %s", c)
				}
			}
			if len(f.GPUs) != 2 || f.GPUs[0].FreeMilli != 500 || f.GPUs[0].Model != "T4" || f.GPUs[1].FreeMemoryMiB != 15360 {
				t.Errorf("GPUs %+v", f.GPUs)
			}
		})
	}
}
