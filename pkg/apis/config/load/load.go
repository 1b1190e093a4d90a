// Package load turns what a plugin factory receives (nil, or internal args
// the kube-scheduler's configuration loader decoded, defaulted and
// converted) into validated internal args, the same way for every gpusched
// plugin and for the front ends that take the same args outside a
// KubeSchedulerConfiguration (the extender, the simulator).
package load

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/pkg/apis/config"
	configv1 "github.com/gpusched/gpusched/pkg/apis/config/v1"
	"github.com/gpusched/gpusched/pkg/apis/config/validation"
)

// kind is how each plugin's args load: their defaults, their conversion to
// the internal type, and their validation.
type kind[Internal any, External any] struct {
	name     string
	defaults func(*External)
	convert  func(*External, *Internal)
	validate func(*field.Path, *Internal) field.ErrorList
}

var (
	gpuPlacement = kind[config.GPUPlacementArgs, configv1.GPUPlacementArgs]{
		"GPUPlacementArgs", configv1.SetDefaults_GPUPlacementArgs,
		configv1.Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs, validation.ValidateGPUPlacementArgs}
	gpuTelemetry = kind[config.GPUTelemetryArgs, configv1.GPUTelemetryArgs]{
		"GPUTelemetryArgs", configv1.SetDefaults_GPUTelemetryArgs,
		configv1.Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs, validation.ValidateGPUTelemetryArgs}
	gpuGang = kind[config.GPUGangArgs, configv1.GPUGangArgs]{
		"GPUGangArgs", configv1.SetDefaults_GPUGangArgs,
		configv1.Convert_v1_GPUGangArgs_To_config_GPUGangArgs, validation.ValidateGPUGangArgs}
)

// fromObject returns validated internal args: the defaults for nil, obj
// itself when it has the internal type. Anything else is an error naming
// the type wanted and the type given.
func (k kind[I, E]) fromObject(obj runtime.Object) (*I, error) {
	var args *I
	switch a := any(obj).(type) {
	case nil:
		var external E
		k.defaults(&external)
		args = new(I)
		k.convert(&external, args)
	case *I:
		args = a
	default:
		return nil, fmt.Errorf("want args of type %s, got %T", k.name, obj)
	}
	if errs := k.validate(nil, args); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", k.name, errs.ToAggregate())
	}
	return args, nil
}

// fromYAML decodes the versioned form strictly (an unknown field is an
// error naming it), then defaults, converts and validates it.
func (k kind[I, E]) fromYAML(data []byte) (*I, error) {
	var external E
	if err := yaml.UnmarshalStrict(data, &external); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", k.name, err)
	}
	k.defaults(&external)
	args := new(I)
	k.convert(&external, args)
	if errs := k.validate(nil, args); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", k.name, errs.ToAggregate())
	}
	return args, nil
}

// GPUPlacementArgs returns validated GPUPlacement args from obj: nil for the
// defaults, or internal args.
func GPUPlacementArgs(obj runtime.Object) (*config.GPUPlacementArgs, error) {
	return gpuPlacement.fromObject(obj)
}

// GPUPlacementArgsFromYAML reads GPUPlacement args in their versioned form,
// as they appear under a profile's pluginConfig (apiVersion and kind may be
// left out), and returns them validated.
func GPUPlacementArgsFromYAML(data []byte) (*config.GPUPlacementArgs, error) {
	return gpuPlacement.fromYAML(data)
}

// GPUTelemetryArgs returns validated GPUTelemetry args from obj.
func GPUTelemetryArgs(obj runtime.Object) (*config.GPUTelemetryArgs, error) {
	return gpuTelemetry.fromObject(obj)
}

// GPUGangArgs returns validated GPUGang args from obj.
func GPUGangArgs(obj runtime.Object) (*config.GPUGangArgs, error) {
	return gpuGang.fromObject(obj)
}
