package validation

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestValidateGPUPlacementArgs(t *testing.T) {
	gpuRes := func(w int64) config.ResourceSpec { return config.ResourceSpec{Name: config.ResourceGPU, Weight: w} }
	tests := []struct {
		name     string
		strategy config.ScoringStrategy
		want     []string // "field: type" of each error
	}{
		{name: "valid", strategy: config.ScoringStrategy{Type: gpu.PolicyPacking, Resources: []config.ResourceSpec{gpuRes(1), {Name: config.ResourceGPUMemory, Weight: 100}}}},
		{name: "unknown type", strategy: config.ScoringStrategy{Type: "Tetris", Resources: []config.ResourceSpec{gpuRes(1)}},
			want: []string{"args.scoringStrategy.type: Invalid value"}},
		{name: "no resources", strategy: config.ScoringStrategy{Type: gpu.PolicyBestFit},
			want: []string{"args.scoringStrategy.resources: Required value"}},
		{name: "unknown resource, duplicate, bad weights", strategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{
			{Name: "cpu", Weight: 1}, gpuRes(0), gpuRes(101)}},
			want: []string{
				"args.scoringStrategy.resources[0].name: Unsupported value",
				"args.scoringStrategy.resources[1].weight: Invalid value",
				"args.scoringStrategy.resources[2].name: Duplicate value",
				"args.scoringStrategy.resources[2].weight: Invalid value",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateGPUPlacementArgs(field.NewPath("args"), &config.GPUPlacementArgs{ScoringStrategy: tt.strategy})
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+": "+e.Type.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("error %d: %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestValidateFragmentation(t *testing.T) {
	tests := []struct {
		name string
		frag config.Fragmentation
		want []string
	}{
		{name: "valid", frag: config.Fragmentation{HalfLifePods: 500, TypicalPods: []config.PodShape{
			{MilliCPU: 8000, GPUs: 1, MilliGPU: 1000, Weight: 5}, {MilliCPU: 4000, GPUs: 1, MilliGPU: 250, Models: []string{"T4"}, Weight: 2}, {MilliCPU: 2000, Weight: 1}}}},
		{name: "every field wrong", frag: config.Fragmentation{HalfLifePods: -1, TypicalPods: []config.PodShape{
			{MilliCPU: -1, GPUs: 65, MilliGPU: 1000, Weight: 0},
			{GPUs: 0, MilliGPU: 500, Weight: 1},
			{GPUs: 2, MilliGPU: 500, Weight: 1},
			{GPUs: 1, MilliGPU: 0, Weight: 1}}},
			want: []string{
				"args.fragmentation.halfLifePods: Invalid value",
				"args.fragmentation.typicalPods[0].milliCPU: Invalid value",
				"args.fragmentation.typicalPods[0].gpus: Invalid value",
				"args.fragmentation.typicalPods[0].weight: Invalid value",
				"args.fragmentation.typicalPods[1].milliGPU: Invalid value",
				"args.fragmentation.typicalPods[2].milliGPU: Invalid value",
				"args.fragmentation.typicalPods[3].milliGPU: Invalid value",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := &config.GPUPlacementArgs{
				ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyFGD, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
				Fragmentation:   tt.frag,
			}
			var got []string
			for _, e := range ValidateGPUPlacementArgs(field.NewPath("args"), args) {
				got = append(got, e.Field+": "+e.Type.String())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestValidateBindSettleAfter(t *testing.T) {
	valid := config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}}
	for _, tc := range []struct {
		d    time.Duration
		want string // the error, "" for none
	}{
		{0, ""}, // left out: the default
		{90 * time.Second, ""},
		{-time.Second, `args.bindSettleAfter: Invalid value: "-1s": must be a positive duration`},
	} {
		errs := ValidateGPUPlacementArgs(field.NewPath("args"), &config.GPUPlacementArgs{ScoringStrategy: valid, BindSettleAfter: tc.d})
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%v: %v, want no error", tc.d, errs)
		case tc.want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.d, errs, tc.want)
		}
	}
}
