package v1

import (
	"reflect"
	"testing"
)

func ptr(i int64) *int64 { return &i }

func TestSetDefaultsGPUPlacementArgs(t *testing.T) {
	learned := func() *Fragmentation { return &Fragmentation{HalfLifePods: ptr(DefaultHalfLifePods)} }
	tests := []struct {
		name string
		in   GPUPlacementArgs
		want GPUPlacementArgs
	}{
		{
			name: "empty args: FragFit, GPU compute for the resource-weighted policies",
			in:   GPUPlacementArgs{},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FragFit", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}, Fragmentation: learned()},
		},
		{
			name: "type set, resources left out",
			in:   GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread"}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}, Fragmentation: learned()},
		},
		{
			name: "a resource without weight gets 1; a set weight is kept",
			in: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory"}}}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FragFit", Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory", Weight: ptr(1)}}}, Fragmentation: learned()},
		},
		{
			name: "FGD shapes: whole-GPU shapes get 1000 milli-GPU; a set half-life is kept",
			in: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FGD"}, Fragmentation: &Fragmentation{HalfLifePods: ptr(0),
				TypicalPods: []PodShape{{MilliCPU: 8000, GPUs: 2, Weight: 3}, {MilliCPU: 4000, GPUs: 1, MilliGPU: 500, Weight: 1}}}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FGD", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}},
				Fragmentation: &Fragmentation{HalfLifePods: ptr(0), TypicalPods: []PodShape{
					{MilliCPU: 8000, GPUs: 2, MilliGPU: 1000, Weight: 3}, {MilliCPU: 4000, GPUs: 1, MilliGPU: 500, Weight: 1}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.DeepCopyObject().(*GPUPlacementArgs)
			SetDefaults_GPUPlacementArgs(got)
			if !reflect.DeepEqual(got, &tt.want) {
				t.Errorf("got %+v %+v, want %+v %+v", *got.ScoringStrategy, *got.Fragmentation, *tt.want.ScoringStrategy, *tt.want.Fragmentation)
			}
		})
	}
}
