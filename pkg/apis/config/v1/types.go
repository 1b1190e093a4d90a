// Package v1 is the versioned form of gpusched's plugin arguments
// (kubescheduler.config.k8s.io/v1, kind GPUPlacementArgs), with defaults and
// conversion to the internal types in package config.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GPUPlacementArgs configures the GPUPlacement plugin.
type GPUPlacementArgs struct {
	metav1.TypeMeta `json:",inline"`

	// ScoringStrategy selects the placement policy and how it weighs
	// resources. Default: BestFit on nvidia.com/gpu with weight 1.
	ScoringStrategy *ScoringStrategy `json:"scoringStrategy,omitempty"`
}

// ScoringStrategy is a placement policy and the weights of the resources it scores.
type ScoringStrategy struct {
	// Type is BestFit, Spread or Packing, or one of the FGD paper's reference
	// policies Random, DotProd, GpuClustering, GpuPacking, BestFitCPUGPU
	// (docs/policies.md). Default: BestFit.
	Type string `json:"type,omitempty"`
	// Resources are the resources scored and their weights: nvidia.com/gpu
	// (GPU compute) and gpusched.io/gpu-memory. Default: nvidia.com/gpu, weight 1.
	Resources []ResourceSpec `json:"resources,omitempty"`
}

// ResourceSpec weighs one resource in scoring.
type ResourceSpec struct {
	Name string `json:"name"`
	// Weight is 1..100. Default: 1.
	Weight *int64 `json:"weight,omitempty"`
}

// DeepCopyInto copies a into out.
func (a *GPUPlacementArgs) DeepCopyInto(out *GPUPlacementArgs) {
	*out = *a
	if a.ScoringStrategy != nil {
		s := *a.ScoringStrategy
		s.Resources = make([]ResourceSpec, len(a.ScoringStrategy.Resources))
		for i, r := range a.ScoringStrategy.Resources {
			s.Resources[i] = r
			if r.Weight != nil {
				w := *r.Weight
				s.Resources[i].Weight = &w
			}
		}
		out.ScoringStrategy = &s
	}
}

// DeepCopyObject implements runtime.Object.
func (a *GPUPlacementArgs) DeepCopyObject() runtime.Object {
	out := new(GPUPlacementArgs)
	a.DeepCopyInto(out)
	return out
}
