package config

import (
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNewPolicyWithShapes: the shapes given measure fragmentation for a
// policy that measures it when the args configure no typical pods; typical
// pods the args configure are kept; a policy that measures none has none.
func TestNewPolicyWithShapes(t *testing.T) {
	given := gpu.StaticShapes{
		{Demand: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 4000}, Weight: 0.75},
		{Demand: gpu.Demand{Count: 1, Milli: 500, MilliCPU: 2000}, Weight: 0.25},
	}
	configured := []PodShape{{MilliCPU: 8000, GPUs: 2, MilliGPU: 1000, Weight: 1}}
	// The configured seed alone, weight 1 of 1.
	fromArgs := []gpu.TypicalPod{{Demand: gpu.Demand{Count: 2, Milli: 1000, MilliCPU: 8000}, Weight: 1}}
	tests := []struct {
		name       string
		policy     ScoringStrategyType
		fallback   ScoringStrategyType // External's
		configured []PodShape
		shapes     gpu.Shapes
		want       []gpu.TypicalPod
	}{
		{"given shapes, none configured", "PairFit", "", nil, given, given},
		{"configured shapes win", "PairFit", "", configured, given, fromArgs},
		{"no shapes given: the args'", "FGD", "", configured, nil, fromArgs},
		{"no shapes given, none configured", "FragFit", "", nil, nil, []gpu.TypicalPod{}},
		{"a policy that measures none", "BestFit", "", nil, given, nil},
		// External: the fallback picks the GPUs and measures the fragment.
		{"External falling back to PairFit", ScoringStrategyExternal, "PairFit", nil, given, given},
		{"External falling back to BestFit", ScoringStrategyExternal, "BestFit", nil, given, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := &GPUPlacementArgs{ScoringStrategy: ScoringStrategy{Type: tt.policy},
				Fragmentation: Fragmentation{TypicalPods: tt.configured}, External: ExternalPolicy{Fallback: tt.fallback}}
			policy, err := args.NewPolicyWithShapes(tt.shapes)
			if err != nil {
				t.Fatal(err)
			}
			var got []gpu.TypicalPod
			if s := policy.Shapes(); s != nil {
				got = s.Typical()
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("typical pods %+v, want %+v", got, tt.want)
			}
		})
	}
}
