package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: config.GroupName, Version: "v1"}

// AddToScheme registers the v1 types, their defaults and their conversions to
// and from the internal types.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUPlacementArgs{}, &GPUTelemetryArgs{}, &GPUGangArgs{})
	s.AddTypeDefaultingFunc(&GPUPlacementArgs{}, func(obj any) { SetDefaults_GPUPlacementArgs(obj.(*GPUPlacementArgs)) })
	s.AddTypeDefaultingFunc(&GPUTelemetryArgs{}, func(obj any) { SetDefaults_GPUTelemetryArgs(obj.(*GPUTelemetryArgs)) })
	s.AddTypeDefaultingFunc(&GPUGangArgs{}, func(obj any) { SetDefaults_GPUGangArgs(obj.(*GPUGangArgs)) })
	if err := addTelemetryConversions(s); err != nil {
		return err
	}
	if err := addGangConversions(s); err != nil {
		return err
	}
	if err := s.AddConversionFunc((*GPUPlacementArgs)(nil), (*config.GPUPlacementArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs(a.(*GPUPlacementArgs), b.(*config.GPUPlacementArgs))
		return nil
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*config.GPUPlacementArgs)(nil), (*GPUPlacementArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_config_GPUPlacementArgs_To_v1_GPUPlacementArgs(a.(*config.GPUPlacementArgs), b.(*GPUPlacementArgs))
		return nil
	})
}

// Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs converts user-facing
// args to internal ones. A missing weight converts to 0, which validation
// rejects: defaults are applied before conversion.
func Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs(in *GPUPlacementArgs, out *config.GPUPlacementArgs) {
	*out = config.GPUPlacementArgs{}
	if f := in.Fragmentation; f != nil {
		if f.HalfLifePods != nil {
			out.Fragmentation.HalfLifePods = *f.HalfLifePods
		}
		for _, sh := range f.TypicalPods {
			out.Fragmentation.TypicalPods = append(out.Fragmentation.TypicalPods, config.PodShape{
				MilliCPU: sh.MilliCPU, MemoryMiB: sh.MemoryMiB, GPUs: sh.GPUs, MilliGPU: sh.MilliGPU, Models: append([]string(nil), sh.Models...), Weight: sh.Weight})
		}
	}
	if in.External != nil {
		convertExternalToConfig(in.External, &out.External)
	}
	if in.BindSettleAfter != nil {
		out.BindSettleAfter = in.BindSettleAfter.Duration
	}
	if d := in.DRA; d != nil {
		out.DRA = config.DRA{Enabled: d.Enabled != nil && *d.Enabled, Driver: d.Driver, GroupAttributes: append([]string(nil), d.GroupAttributes...)}
	}
	if in.ScoringStrategy == nil {
		return
	}
	out.ScoringStrategy.Type = config.ScoringStrategyType(in.ScoringStrategy.Type)
	for _, r := range in.ScoringStrategy.Resources {
		spec := config.ResourceSpec{Name: r.Name}
		if r.Weight != nil {
			spec.Weight = *r.Weight
		}
		out.ScoringStrategy.Resources = append(out.ScoringStrategy.Resources, spec)
	}
}

// Convert_config_GPUPlacementArgs_To_v1_GPUPlacementArgs converts internal args
// to their user-facing form.
func Convert_config_GPUPlacementArgs_To_v1_GPUPlacementArgs(in *config.GPUPlacementArgs, out *GPUPlacementArgs) {
	*out = GPUPlacementArgs{ScoringStrategy: &ScoringStrategy{Type: string(in.ScoringStrategy.Type)}}
	for _, r := range in.ScoringStrategy.Resources {
		w := r.Weight
		out.ScoringStrategy.Resources = append(out.ScoringStrategy.Resources, ResourceSpec{Name: r.Name, Weight: &w})
	}
	enabled := in.DRA.Enabled
	out.DRA = &DRA{Enabled: &enabled, Driver: in.DRA.Driver, GroupAttributes: append([]string(nil), in.DRA.GroupAttributes...)}
	out.External = convertExternalFromConfig(&in.External)
	if in.BindSettleAfter != 0 {
		out.BindSettleAfter = &metav1.Duration{Duration: in.BindSettleAfter}
	}
	h := in.Fragmentation.HalfLifePods
	out.Fragmentation = &Fragmentation{HalfLifePods: &h}
	for _, sh := range in.Fragmentation.TypicalPods {
		out.Fragmentation.TypicalPods = append(out.Fragmentation.TypicalPods, PodShape{
			MilliCPU: sh.MilliCPU, MemoryMiB: sh.MemoryMiB, GPUs: sh.GPUs, MilliGPU: sh.MilliGPU, Models: append([]string(nil), sh.Models...), Weight: sh.Weight})
	}
}

// addGangConversions registers the conversions of GPUGangArgs.
func addGangConversions(s *runtime.Scheme) error {
	if err := s.AddConversionFunc((*GPUGangArgs)(nil), (*config.GPUGangArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_v1_GPUGangArgs_To_config_GPUGangArgs(a.(*GPUGangArgs), b.(*config.GPUGangArgs))
		return nil
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*config.GPUGangArgs)(nil), (*GPUGangArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_config_GPUGangArgs_To_v1_GPUGangArgs(a.(*config.GPUGangArgs), b.(*GPUGangArgs))
		return nil
	})
}
