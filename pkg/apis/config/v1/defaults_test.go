package v1

import (
	"reflect"
	"testing"
)

func ptr(i int64) *int64 { return &i }

// defaultDRA is the DRA section a user leaves out: enabled, NVIDIA's
// driver, the PCIe root as the interconnect group.
func defaultDRA() *DRA {
	enabled := true
	return &DRA{Enabled: &enabled, Driver: "gpu.nvidia.com", GroupAttributes: []string{"resource.kubernetes.io/pcieRoot"}}
}

func TestSetDefaultsGPUPlacementArgs(t *testing.T) {
	learned := func() *Fragmentation { return &Fragmentation{HalfLifePods: ptr(DefaultHalfLifePods)} }
	tests := []struct {
		name string
		in   GPUPlacementArgs
		want GPUPlacementArgs
	}{
		{
			name: "empty args: PairFit, GPU compute for the resource-weighted policies",
			in:   GPUPlacementArgs{},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "PairFit", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}, Fragmentation: learned(), DRA: defaultDRA()},
		},
		{
			name: "type set, resources left out",
			in:   GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread"}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "Spread", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}}, Fragmentation: learned(), DRA: defaultDRA()},
		},
		{
			name: "a resource without weight gets 1; a set weight is kept",
			in: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory"}}}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "PairFit", Resources: []ResourceSpec{
				{Name: "nvidia.com/gpu", Weight: ptr(3)}, {Name: "gpusched.io/gpu-memory", Weight: ptr(1)}}}, Fragmentation: learned(), DRA: defaultDRA()},
		},
		{
			name: "FGD shapes: whole-GPU shapes get 1000 milli-GPU; a set half-life is kept",
			in: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FGD"}, Fragmentation: &Fragmentation{HalfLifePods: ptr(0),
				TypicalPods: []PodShape{{MilliCPU: 8000, GPUs: 2, Weight: 3}, {MilliCPU: 4000, GPUs: 1, MilliGPU: 500, Weight: 1}}}},
			want: GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: "FGD", Resources: []ResourceSpec{{Name: "nvidia.com/gpu", Weight: ptr(1)}}},
				Fragmentation: &Fragmentation{HalfLifePods: ptr(0), TypicalPods: []PodShape{
					{MilliCPU: 8000, GPUs: 2, MilliGPU: 1000, Weight: 3}, {MilliCPU: 4000, GPUs: 1, MilliGPU: 500, Weight: 1}}}, DRA: defaultDRA()},
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

// TestSetDefaultsDRAArgs: what the user sets in the DRA section is kept.
func TestSetDefaultsDRAArgs(t *testing.T) {
	off := false
	tests := []struct {
		name     string
		in, want *DRA
	}{
		{name: "left out", in: nil, want: defaultDRA()},
		{name: "disabled", in: &DRA{Enabled: &off}, want: &DRA{Enabled: &off, Driver: "gpu.nvidia.com", GroupAttributes: []string{"resource.kubernetes.io/pcieRoot"}}},
		{name: "another driver and groups", in: &DRA{Driver: "gpu.example.com", GroupAttributes: []string{"clique"}},
			want: &DRA{Enabled: defaultDRA().Enabled, Driver: "gpu.example.com", GroupAttributes: []string{"clique"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := &GPUPlacementArgs{DRA: tt.in}
			SetDefaults_GPUPlacementArgs(args)
			if !reflect.DeepEqual(args.DRA, tt.want) {
				t.Errorf("got %+v (enabled %v), want %+v (enabled %v)", *args.DRA, *args.DRA.Enabled, *tt.want, *tt.want.Enabled)
			}
		})
	}
}
