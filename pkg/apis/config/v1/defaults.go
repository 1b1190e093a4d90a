package v1

import (
	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// SetDefaults_GPUPlacementArgs fills in what the user left out: the engine's
// default policy (gpu.DefaultPolicy) with pod shapes learned from the pods
// scheduled, and GPU compute as the resource that resource-weighted policies
// score, each resource with weight 1.
func SetDefaults_GPUPlacementArgs(a *GPUPlacementArgs) {
	if a.ScoringStrategy == nil {
		a.ScoringStrategy = &ScoringStrategy{}
	}
	s := a.ScoringStrategy
	if s.Type == "" {
		s.Type = string(gpu.DefaultPolicy)
	}
	if len(s.Resources) == 0 {
		s.Resources = []ResourceSpec{{Name: config.ResourceGPU}}
	}
	for i := range s.Resources {
		if s.Resources[i].Weight == nil {
			one := int64(1)
			s.Resources[i].Weight = &one
		}
	}
	if a.Fragmentation == nil {
		a.Fragmentation = &Fragmentation{}
	}
	if a.Fragmentation.HalfLifePods == nil {
		h := DefaultHalfLifePods
		a.Fragmentation.HalfLifePods = &h
	}
	setDefaultsDRA(a)
	setDefaultsExternal(a.External)
	for i := range a.Fragmentation.TypicalPods {
		if sh := &a.Fragmentation.TypicalPods[i]; sh.GPUs > 0 && sh.MilliGPU == 0 {
			sh.MilliGPU = 1000
		}
	}
}

// DefaultHalfLifePods is the default half-life of the learned pod shapes.
const DefaultHalfLifePods int64 = 2000

// setDefaultsDRA enables DRA with NVIDIA's driver and the PCIe root as the
// interconnect group.
func setDefaultsDRA(a *GPUPlacementArgs) {
	if a.DRA == nil {
		a.DRA = &DRA{}
	}
	if a.DRA.Enabled == nil {
		enabled := true
		a.DRA.Enabled = &enabled
	}
	if a.DRA.Driver == "" {
		a.DRA.Driver = gpu.DefaultDRADriver
	}
	if len(a.DRA.GroupAttributes) == 0 {
		for _, name := range gpu.DefaultDRAGroupAttributes {
			a.DRA.GroupAttributes = append(a.DRA.GroupAttributes, string(name))
		}
	}
}
