package validation

import (
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// MaxScheduleTimeoutSeconds is the longest the framework lets a pod wait at
// Permit (15 minutes).
const MaxScheduleTimeoutSeconds = 900

// MaxGangBackoffSeconds bounds the back-off of a released gang.
const MaxGangBackoffSeconds = 600

// ValidateGPUGangArgs reports every invalid field of args, each with its
// path, its value and what is allowed.
func ValidateGPUGangArgs(path *field.Path, args *config.GPUGangArgs) field.ErrorList {
	var errs field.ErrorList
	if t := args.ScheduleTimeoutSeconds; t < 1 || t > MaxScheduleTimeoutSeconds {
		errs = append(errs, field.Invalid(path.Child("scheduleTimeoutSeconds"), t, "must be from 1 to 900"))
	}
	if b := args.BackoffSeconds; b < 1 || b > MaxGangBackoffSeconds {
		errs = append(errs, field.Invalid(path.Child("backoffSeconds"), b, "must be from 1 to 600"))
	}
	if args.TopologyKey != "" {
		errs = append(errs, metav1validation.ValidateLabelName(args.TopologyKey, path.Child("topologyKey"))...)
	}
	return errs
}
