package v1

import (
	"reflect"
	"testing"
)

func ptr(i int64) *int64 { return &i }

func TestSetDefaultsGPUPlacementArgs(t *testing.T) {
	tests := []struct {
		name string
		in   GPUPlacementArgs
		want GPUPlacementArgs
	}{
		{
			name: "empty args: best-fit on GPU compute",
			in:   GPUPlacementArgs{},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "BestFit", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}},
		},
		{
			name: "type set, resources left out",
			in:   GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread"}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}},
		},
		{
			name: "a resource without weight gets 1; a set weight is kept",
			in: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory"}}}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "BestFit", Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory", Weight: ptr(1)}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.DeepCopyObject().(*GPUPlacementArgs)
			SetDefaults_GPUPlacementArgs(got)
			if !reflect.DeepEqual(got, &tt.want) {
				t.Errorf("got %+v, want %+v", *got.ScoringStrategy, *tt.want.ScoringStrategy)
			}
		})
	}
}
