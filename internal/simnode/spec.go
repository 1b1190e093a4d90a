package simnode

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	rgen "github.com/opencontainers/runtime-tools/generate"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
)

// imageEnv is the environment of a CUDA base image's config, which the
// runtime puts first in every container's environment.
var imageEnv = []string{"PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin", agentnri.EnvVisibleDevices + "=all"}

// initialSpec is the OCI spec a runtime builds for ctr before NRI: the
// image's environment followed by the container's own (containerd appends a
// variable set in both, so it is there twice), and its devices and mounts.
func initialSpec(ctr *api.Container) *rspec.Spec {
	spec := &rspec.Spec{
		Process:     &rspec.Process{Env: append(append([]string{}, imageEnv...), ctr.GetEnv()...)},
		Annotations: map[string]string{},
		Linux:       &rspec.Linux{Resources: &rspec.LinuxResources{}},
	}
	for k, v := range ctr.GetAnnotations() {
		spec.Annotations[k] = v
	}
	for _, d := range ctr.GetLinux().GetDevices() {
		spec.Linux.Devices = append(spec.Linux.Devices, d.ToOCI())
	}
	for _, m := range ctr.GetMounts() {
		spec.Mounts = append(spec.Mounts, m.ToOCI(nil))
	}
	return spec
}

// applyAdjustment applies the plugins' adjustment to spec with NRI's spec
// generator over runtime-tools' (what containerd does), and returns the CDI
// devices the runtime would inject.
func applyAdjustment(spec *rspec.Spec, adj *api.ContainerAdjustment) ([]string, error) {
	var cdi []string
	g := rgen.NewFromSpec(spec)
	x := nrigen.SpecGenerator(&g, nrigen.WithCDIDeviceInjector(func(_ *rspec.Spec, names []string) error {
		cdi = append(cdi, names...)
		return nil
	}))
	if err := x.Adjust(adj); err != nil {
		return nil, fmt.Errorf("applying the NRI adjustment: %w", err)
	}
	return cdi, nil
}

// ErrNoGPUSetting is returned by GivenGPUs for a container whose final spec
// neither sets NVIDIA_VISIBLE_DEVICES nor has CDI devices.
var ErrNoGPUSetting = errors.New("the container's spec does not set its GPUs")

// GivenGPUs returns the GPUs a container really gets, read from its final
// spec as the NVIDIA runtime reads it: its CDI devices nvidia.com/gpu=<UUID>
// when it has any, else the entries of NVIDIA_VISIBLE_DEVICES ("all" stays
// "all"). A container given no GPU (void) gets an empty, non-nil list. A
// spec that sets NVIDIA_VISIBLE_DEVICES more than once is an error: which
// one wins depends on the reader.
func GivenGPUs(c Container) ([]string, error) {
	var cdi []string
	for _, name := range c.CDIDevices {
		if uuid, ok := strings.CutPrefix(name, "nvidia.com/gpu="); ok {
			cdi = append(cdi, uuid)
		}
	}
	if cdi != nil {
		return cdi, nil
	}
	values := SpecEnv(c.Spec, agentnri.EnvVisibleDevices)
	switch {
	case len(values) == 0:
		return nil, ErrNoGPUSetting
	case len(values) > 1:
		return nil, fmt.Errorf("the container's spec sets %s %d times: %s", agentnri.EnvVisibleDevices, len(values), strings.Join(values, ", "))
	case values[0] == "void" || values[0] == "none" || values[0] == "":
		return []string{}, nil
	}
	return strings.Split(values[0], ","), nil
}

// SpecEnv returns every value a spec's environment gives key, in order.
func SpecEnv(spec *rspec.Spec, key string) []string {
	var out []string
	if spec == nil || spec.Process == nil {
		return nil
	}
	for _, kv := range spec.Process.Env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			out = append(out, v)
		}
	}
	return out
}

// Describe renders the GPUs a container really gets, the way a user would
// look for them: "NVIDIA_VISIBLE_DEVICES=<UUIDs>" in env mode, the CDI
// device names in CDI mode.
func Describe(c Container) string {
	if len(c.CDIDevices) > 0 {
		return "CDI " + strings.Join(c.CDIDevices, ",")
	}
	values := SpecEnv(c.Spec, agentnri.EnvVisibleDevices)
	if len(values) == 0 {
		return "unchanged"
	}
	return agentnri.EnvVisibleDevices + "=" + strings.Join(values, " and ")
}
