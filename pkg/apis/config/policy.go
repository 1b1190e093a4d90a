package config

import "github.com/gpusched/gpusched/pkg/gpu"

// NewPolicy builds the placement policy that validated args select: its
// resource weights, and for a policy that measures fragmentation
// (gpu.PolicyInfo.NeedsShapes) the distribution of pod shapes the args
// configure. Every front end builds its policy here, so the same args make
// the same decisions in the plugin, the extender and the simulator.
//
// For the External strategy it is the fallback policy (ExternalPolicy.Fallback),
// which chooses the GPUs on every node; the front end asks the policy
// service for the node scores (pkg/policyservice).
func (a *GPUPlacementArgs) NewPolicy() (*gpu.Policy, error) {
	return a.NewPolicyWithShapes(nil)
}

// NewPolicyWithShapes is NewPolicy where a policy that measures
// fragmentation measures it against shapes, fixed, when the args configure
// no typical pods (Fragmentation.TypicalPods) and shapes is not nil: the
// simulator's runs use the workload's own typical pods, as the FGD paper
// measures. Typical pods the args configure are kept, learned further with
// their half-life.
func (a *GPUPlacementArgs) NewPolicyWithShapes(shapes gpu.Shapes) (*gpu.Policy, error) {
	name := a.ScoringStrategy.Type
	if name == ScoringStrategyExternal {
		name = a.External.Fallback
	}
	info, err := gpu.LookupPolicy(string(name))
	if err != nil {
		return nil, err
	}
	var cfg gpu.PolicyConfig
	for _, r := range a.ScoringStrategy.Resources {
		switch r.Name {
		case ResourceGPU:
			cfg.Weights.GPU = r.Weight
		case ResourceGPUMemory:
			cfg.Weights.Memory = r.Weight
		}
	}
	if info.NeedsShapes {
		if shapes != nil && len(a.Fragmentation.TypicalPods) == 0 {
			cfg.Shapes = shapes
		} else {
			cfg.Shapes = a.Fragmentation.NewShapeWindow()
		}
	}
	return gpu.NewPolicy(info.Type, cfg)
}

// NewShapeWindow is the distribution of pod shapes f configures: its seed,
// learned further with its half-life.
func (f *Fragmentation) NewShapeWindow() *gpu.ShapeWindow {
	seed := make([]gpu.TypicalPod, 0, len(f.TypicalPods))
	for _, sh := range f.TypicalPods {
		d := gpu.Demand{Count: int(sh.GPUs), Milli: sh.MilliGPU, Models: sh.Models, MilliCPU: sh.MilliCPU, HostMemoryMiB: sh.MemoryMiB}
		seed = append(seed, gpu.TypicalPod{Demand: d, Weight: float64(sh.Weight)})
	}
	return gpu.NewShapeWindow(f.HalfLifePods, seed)
}
