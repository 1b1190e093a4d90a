package validation

import (
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// ValidateGPUTelemetryArgs reports every invalid field of args, each with its
// path, its value and what is allowed. An empty Prometheus address is valid
// here (the simulator supplies telemetry from a file); the plugin requires
// one when it must query Prometheus.
func ValidateGPUTelemetryArgs(path *field.Path, args *config.GPUTelemetryArgs) field.ErrorList {
	var errs field.ErrorList
	p := args.Prometheus
	pPath := path.Child("prometheus")
	if p.Address != "" {
		u, err := url.Parse(p.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(pPath.Child("address"), p.Address, "must be an http or https URL with a host, e.g. http://prometheus.monitoring:9090"))
		}
	}
	if p.BearerTokenFile != "" && p.BasicAuthUsername != "" {
		errs = append(errs, field.Invalid(pPath.Child("bearerTokenFile"), p.BearerTokenFile, "must be empty when basicAuthUsername is set: use one kind of auth"))
	}
	if p.BasicAuthPasswordFile != "" && p.BasicAuthUsername == "" {
		errs = append(errs, field.Required(pPath.Child("basicAuthUsername"), "needed with basicAuthPasswordFile"))
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, field.Invalid(path.Child(name), d.String(), "must be a positive duration such as 15s"))
		}
	}
	positive("refreshInterval", args.RefreshInterval.Duration)
	positive("queryTimeout", args.QueryTimeout.Duration)
	positive("maxAge", args.MaxAge.Duration)
	if args.MaxAge.Duration > 0 && args.MaxAge.Duration < args.RefreshInterval.Duration {
		errs = append(errs, field.Invalid(path.Child("maxAge"), args.MaxAge.Duration.String(),
			"must be at least refreshInterval ("+args.RefreshInterval.Duration.String()+"), or every snapshot would be stale before the next"))
	}
	w := &args.Weights
	wPath := path.Child("weights")
	sum := int64(0)
	for _, f := range []struct {
		name string
		v    int64
	}{{"staticMemory", w.StaticMemory}, {"staticBandwidth", w.StaticBandwidth}, {"staticCompute", w.StaticCompute},
		{"utilization", w.Utilization}, {"memory", w.Memory}, {"video", w.Video}, {"power", w.Power}, {"dramBandwidth", w.DRAMBandwidth}} {
		if f.v < 0 || f.v > MaxWeight {
			errs = append(errs, field.Invalid(wPath.Child(f.name), f.v, "must be from 0 to 100"))
		}
		sum += max(0, f.v)
	}
	if sum == 0 {
		errs = append(errs, field.Invalid(wPath, "all 0", "at least one weight must be positive"))
	}
	if args.SensitivityFactor < 1 || args.SensitivityFactor > MaxWeight {
		errs = append(errs, field.Invalid(path.Child("sensitivityFactor"), args.SensitivityFactor, "must be from 1 to 100"))
	}
	if args.Health.Enabled && args.Health.XIDWindow.Duration < time.Second {
		errs = append(errs, field.Invalid(path.Child("health", "xidWindow"), args.Health.XIDWindow.Duration.String(), "must be at least 1s"))
	}
	return errs
}
