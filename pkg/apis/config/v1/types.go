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
	// resources. Default: the default policy (PairFit), nvidia.com/gpu with
	// weight 1.
	ScoringStrategy *ScoringStrategy `json:"scoringStrategy,omitempty"`

	// Fragmentation configures the fragmentation-aware policies (PairFit,
	// FragFit, FGD): the distribution of pod shapes they keep room for. Default: learned from
	// the pods the scheduler sees, with a half-life of 2000 pods.
	Fragmentation *Fragmentation `json:"fragmentation,omitempty"`

	// DRA configures how GPUs that a DRA driver publishes in ResourceSlices
	// are read and placed (docs/dra.md). Default: enabled, NVIDIA's driver.
	DRA *DRA `json:"dra,omitempty"`

	// External configures scoringStrategy.type External: the policy
	// service that scores nodes (docs/policy-service.md). Required with
	// that type, refused with any other.
	External *ExternalPolicy `json:"external,omitempty"`

	// BindSettleAfter: when a bind's write fails without saying whether the
	// API server stored it (a timeout, a lost connection), the pod's GPUs
	// stay held until a read this long after the write ended finds the pod
	// unbound. At least the API server's --request-timeout. Default: 60s.
	BindSettleAfter *metav1.Duration `json:"bindSettleAfter,omitempty"`
}

// DRA configures GPUPlacement on clusters where GPUs are DRA devices.
type DRA struct {
	// Enabled reads GPUs from the driver's ResourceSlices through the
	// scheduler's DRA manager and counts their DRA allocations; a scheduler
	// without a DRA manager ignores it. Default: true.
	Enabled *bool `json:"enabled,omitempty"`
	// Driver is the DRA driver whose devices are GPUs (ResourceSlice
	// spec.driver). Default: gpu.nvidia.com.
	Driver string `json:"driver,omitempty"`
	// GroupAttributes are the device attributes read, in order, as a GPU's
	// interconnect group; an attribute without a domain is in the driver's.
	// Default: [resource.kubernetes.io/pcieRoot].
	GroupAttributes []string `json:"groupAttributes,omitempty"`
}

// Fragmentation is the distribution of pod shapes ("typical pods") that
// fragmentation is measured against.
type Fragmentation struct {
	// TypicalPods seeds the distribution, e.g. with a recent workload's
	// shapes, so the policy starts informed.
	TypicalPods []PodShape `json:"typicalPods,omitempty"`
	// HalfLifePods is how fast the learned distribution forgets: a pod's
	// shape weighs half as much after this many more pods. 0 learns nothing
	// (the seed alone). Default: 2000.
	HalfLifePods *int64 `json:"halfLifePods,omitempty"`
}

// PodShape is one shape of pod and its relative weight.
type PodShape struct {
	// MilliCPU is the pod's CPU request in milli-CPU.
	MilliCPU int64 `json:"milliCPU"`
	// MemoryMiB is the pod's memory request in MiB; PairFit and FragFit keep
	// room for it, FGD does not look at memory.
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// GPUs is the number of GPUs; 0 for a pod without GPUs.
	GPUs int32 `json:"gpus"`
	// MilliGPU is per GPU: 1000 for whole GPUs, 1..999 for a share of one
	// GPU. Default: 1000 when GPUs > 0.
	MilliGPU int64 `json:"milliGPU,omitempty"`
	// Models restricts the shape to these GPU models.
	Models []string `json:"models,omitempty"`
	// Weight is the shape's frequency relative to the others, ≥ 1.
	Weight int64 `json:"weight"`
}

// ScoringStrategy is a placement policy and the weights of the resources it scores.
type ScoringStrategy struct {
	// Type names one of the placement policies listed in docs/policies.md
	// (the engine's registry, gpu.Policies), or External for a policy
	// service (External). Default: PairFit.
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
	if a.DRA != nil {
		d := *a.DRA
		if d.Enabled != nil {
			e := *d.Enabled
			d.Enabled = &e
		}
		d.GroupAttributes = append([]string(nil), d.GroupAttributes...)
		out.DRA = &d
	}
	out.External = deepCopyExternal(a.External)
	if a.BindSettleAfter != nil {
		d := *a.BindSettleAfter
		out.BindSettleAfter = &d
	}
	if a.Fragmentation != nil {
		f := Fragmentation{}
		if a.Fragmentation.HalfLifePods != nil {
			h := *a.Fragmentation.HalfLifePods
			f.HalfLifePods = &h
		}
		for _, sh := range a.Fragmentation.TypicalPods {
			sh.Models = append([]string(nil), sh.Models...)
			f.TypicalPods = append(f.TypicalPods, sh)
		}
		out.Fragmentation = &f
	}
}

// DeepCopyObject implements runtime.Object.
func (a *GPUPlacementArgs) DeepCopyObject() runtime.Object {
	out := new(GPUPlacementArgs)
	a.DeepCopyInto(out)
	return out
}
