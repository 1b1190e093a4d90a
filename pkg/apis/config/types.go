package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// GPUPlacementArgs configures the GPUPlacement plugin.
type GPUPlacementArgs struct {
	metav1.TypeMeta

	// ScoringStrategy selects the placement policy and how it weighs resources.
	ScoringStrategy ScoringStrategy

	// Fragmentation configures the fragmentation-aware policies (those whose
	// gpu.PolicyInfo.NeedsShapes): the pod shapes they keep room for.
	Fragmentation Fragmentation

	// DRA configures how GPUs that a DRA driver publishes in ResourceSlices
	// are read and placed (docs/dra.md).
	DRA DRA

	// External configures the External scoring strategy (a policy
	// service); zero for the engine's policies.
	External ExternalPolicy

	// BindSettleAfter is how long after a Binding's write failed with its
	// outcome unknown the pod's GPUs stay held before a read that finds it
	// unbound frees them (gpu.BindInDoubt); 0 for
	// gpu.DefaultBindSettleAfter.
	BindSettleAfter time.Duration
}

// DRA configures GPUPlacement on clusters where GPUs are DRA devices.
type DRA struct {
	// Enabled reads GPUs from the DRA driver's ResourceSlices and counts
	// their DRA allocations, when the scheduler has a DRA manager.
	Enabled bool
	// Driver is the DRA driver whose devices are GPUs.
	Driver string
	// GroupAttributes are the device attributes read, in order, as a GPU's
	// interconnect group.
	GroupAttributes []string
}

// Fragmentation is the distribution of pod shapes ("typical pods") that
// fragmentation is measured against: a seed, and what is learned from the
// pods the scheduler sees.
type Fragmentation struct {
	// TypicalPods seeds the distribution.
	TypicalPods []PodShape
	// HalfLifePods is how fast the learned distribution forgets: a pod's
	// shape weighs half as much after this many more pods. 0 learns nothing,
	// leaving the seed alone.
	HalfLifePods int64
}

// PodShape is one shape of pod and its relative weight.
type PodShape struct {
	MilliCPU  int64
	MemoryMiB int64
	GPUs      int32
	// MilliGPU is per GPU: 1000 for whole GPUs, 1..999 for a share of one.
	MilliGPU int64
	Models   []string
	Weight   int64
}

// ScoringStrategyType names a placement policy: one of the engine's
// registered policies (gpu.Policies), or External (ScoringStrategyTypes),
// which validation checks.
type ScoringStrategyType = gpu.PolicyType

// ScoringStrategy is a placement policy and the weights of the resources it scores.
type ScoringStrategy struct {
	Type      ScoringStrategyType
	Resources []ResourceSpec
}

// ResourceSpec weighs one resource in scoring.
type ResourceSpec struct {
	// Name is ResourceGPU ("nvidia.com/gpu": GPU compute in milli-GPU) or
	// ResourceGPUMemory ("gpusched.io/gpu-memory").
	Name   string
	Weight int64
}

// The resources a scoring strategy can weigh.
const (
	ResourceGPU       = string(gpu.ResourceGPU)
	ResourceGPUMemory = gpu.AnnotationMemory
)

// DeepCopyInto copies a into out.
func (a *GPUPlacementArgs) DeepCopyInto(out *GPUPlacementArgs) {
	*out = *a
	out.ScoringStrategy.Resources = append([]ResourceSpec(nil), a.ScoringStrategy.Resources...)
	out.DRA.GroupAttributes = append([]string(nil), a.DRA.GroupAttributes...)
	if a.External.TLS != nil {
		t := *a.External.TLS
		out.External.TLS = &t
	}
	out.Fragmentation.TypicalPods = make([]PodShape, len(a.Fragmentation.TypicalPods))
	for i, sh := range a.Fragmentation.TypicalPods {
		out.Fragmentation.TypicalPods[i] = sh
		out.Fragmentation.TypicalPods[i].Models = append([]string(nil), sh.Models...)
	}
}

// DeepCopyObject implements runtime.Object.
func (a *GPUPlacementArgs) DeepCopyObject() runtime.Object {
	out := new(GPUPlacementArgs)
	a.DeepCopyInto(out)
	return out
}
