// Package validation checks gpusched's plugin arguments.
package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// MaxWeight bounds a resource's weight, as kube-scheduler bounds its own.
const MaxWeight = 100

var resourceNames = []string{config.ResourceGPU, config.ResourceGPUMemory}

// ValidateGPUPlacementArgs reports every invalid field of args, each with its
// path, its value and what is allowed.
func ValidateGPUPlacementArgs(path *field.Path, args *config.GPUPlacementArgs) field.ErrorList {
	var errs field.ErrorList
	s := &args.ScoringStrategy
	sPath := path.Child("scoringStrategy")
	errs = append(errs, validateScoringType(path, args)...)
	if len(s.Resources) == 0 {
		errs = append(errs, field.Required(sPath.Child("resources"), "at least one resource to score"))
	}
	seen := map[string]bool{}
	for i, r := range s.Resources {
		rPath := sPath.Child("resources").Index(i)
		switch {
		case !contains(resourceNames, r.Name):
			errs = append(errs, field.NotSupported(rPath.Child("name"), r.Name, resourceNames))
		case seen[r.Name]:
			errs = append(errs, field.Duplicate(rPath.Child("name"), r.Name))
		}
		seen[r.Name] = true
		if r.Weight < 1 || r.Weight > MaxWeight {
			errs = append(errs, field.Invalid(rPath.Child("weight"), r.Weight, "must be from 1 to 100"))
		}
	}
	errs = append(errs, validateFragmentation(path.Child("fragmentation"), &args.Fragmentation)...)
	errs = append(errs, validateDRA(path.Child("dra"), &args.DRA)...)
	if args.BindSettleAfter < 0 {
		errs = append(errs, field.Invalid(path.Child("bindSettleAfter"), args.BindSettleAfter.String(),
			"must be a positive duration, at least the API server's --request-timeout (left out: 60s)"))
	}
	return errs
}

// validateFragmentation checks the pod shapes of the fragmentation-aware policies.
func validateFragmentation(path *field.Path, f *config.Fragmentation) field.ErrorList {
	var errs field.ErrorList
	if f.HalfLifePods < 0 {
		errs = append(errs, field.Invalid(path.Child("halfLifePods"), f.HalfLifePods, "must be 0 (learn nothing) or more"))
	}
	for i, sh := range f.TypicalPods {
		p := path.Child("typicalPods").Index(i)
		if sh.MilliCPU < 0 {
			errs = append(errs, field.Invalid(p.Child("milliCPU"), sh.MilliCPU, "must be 0 or more"))
		}
		if sh.MemoryMiB < 0 {
			errs = append(errs, field.Invalid(p.Child("memoryMiB"), sh.MemoryMiB, "must be 0 or more"))
		}
		if sh.GPUs < 0 || sh.GPUs > 64 {
			errs = append(errs, field.Invalid(p.Child("gpus"), sh.GPUs, "must be from 0 to 64"))
		}
		switch {
		case sh.GPUs == 0 && sh.MilliGPU != 0:
			errs = append(errs, field.Invalid(p.Child("milliGPU"), sh.MilliGPU, "must be 0 for a shape without GPUs"))
		case sh.GPUs > 0 && (sh.MilliGPU < 1 || sh.MilliGPU > 1000):
			errs = append(errs, field.Invalid(p.Child("milliGPU"), sh.MilliGPU, "must be from 1 to 1000"))
		case sh.GPUs > 1 && sh.MilliGPU < 1000:
			errs = append(errs, field.Invalid(p.Child("milliGPU"), sh.MilliGPU, "must be 1000 for a shape of several GPUs: only single-GPU pods share a GPU"))
		}
		if sh.Weight < 1 {
			errs = append(errs, field.Invalid(p.Child("weight"), sh.Weight, "must be 1 or more"))
		}
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
