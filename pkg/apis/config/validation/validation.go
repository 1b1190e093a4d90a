// Package validation checks gpusched's plugin arguments.
package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// MaxWeight bounds a resource's weight, as kube-scheduler bounds its own.
const MaxWeight = 100

var (
	strategyTypes = []string{string(config.BestFit), string(config.Spread), string(config.Packing),
		string(config.Random), string(config.DotProd), string(config.GpuClustering), string(config.GpuPacking), string(config.BestFitCPUGPU)}
	resourceNames = []string{config.ResourceGPU, config.ResourceGPUMemory}
)

// ValidateGPUPlacementArgs reports every invalid field of args, each with its
// path, its value and what is allowed.
func ValidateGPUPlacementArgs(path *field.Path, args *config.GPUPlacementArgs) field.ErrorList {
	var errs field.ErrorList
	s := &args.ScoringStrategy
	sPath := path.Child("scoringStrategy")
	if !contains(strategyTypes, string(s.Type)) {
		errs = append(errs, field.NotSupported(sPath.Child("type"), s.Type, strategyTypes))
	}
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
