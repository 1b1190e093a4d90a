package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// The defaults of GPUTelemetryArgs.
const (
	DefaultRefreshInterval   = 15 * time.Second
	DefaultQueryTimeout      = 2 * time.Second
	DefaultMaxAge            = time.Minute
	DefaultXIDWindow         = 10 * time.Minute
	DefaultSensitivityFactor = int64(4)
)

// DefaultTelemetryWeights are the weights of the parts the user leaves out,
// in TelemetryWeights.fields order: the static parts off, the dynamic ones on
// with utilization counting most.
var DefaultTelemetryWeights = [8]int64{0, 0, 0, 3, 2, 1, 1, 1}

// SetDefaults_GPUTelemetryArgs fills in what the user left out.
func SetDefaults_GPUTelemetryArgs(a *GPUTelemetryArgs) {
	if a.Prometheus == nil {
		a.Prometheus = &PrometheusSource{}
	}
	setDuration(&a.RefreshInterval, DefaultRefreshInterval)
	setDuration(&a.QueryTimeout, DefaultQueryTimeout)
	setDuration(&a.MaxAge, DefaultMaxAge)
	if a.Weights == nil {
		a.Weights = &TelemetryWeights{}
	}
	for i, f := range a.Weights.fields() {
		if *f == nil {
			w := DefaultTelemetryWeights[i]
			*f = &w
		}
	}
	if a.SensitivityFactor == nil {
		f := DefaultSensitivityFactor
		a.SensitivityFactor = &f
	}
	if a.Health == nil {
		a.Health = &HealthFilter{}
	}
	if a.Health.Enabled == nil {
		on := true
		a.Health.Enabled = &on
	}
	setDuration(&a.Health.XIDWindow, DefaultXIDWindow)
}

func setDuration(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}

// Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs converts
// user-facing args to internal ones; unset fields convert to zero, which
// validation rejects where zero is not allowed (defaults come first).
func Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs(in *GPUTelemetryArgs, out *config.GPUTelemetryArgs) {
	*out = config.GPUTelemetryArgs{}
	if p := in.Prometheus; p != nil {
		out.Prometheus = config.PrometheusSource{Address: p.Address, BearerTokenFile: p.BearerTokenFile,
			BasicAuthUsername: p.BasicAuthUsername, BasicAuthPasswordFile: p.BasicAuthPasswordFile, CAFile: p.CAFile,
			InsecureSkipVerify: p.InsecureSkipVerify, NodeLabel: p.NodeLabel, Selector: p.Selector}
	}
	out.RefreshInterval = durationOf(in.RefreshInterval)
	out.QueryTimeout = durationOf(in.QueryTimeout)
	out.MaxAge = durationOf(in.MaxAge)
	if in.SensitivityFactor != nil {
		out.SensitivityFactor = *in.SensitivityFactor
	}
	if in.Weights != nil {
		internal := []*int64{&out.Weights.StaticMemory, &out.Weights.StaticBandwidth, &out.Weights.StaticCompute,
			&out.Weights.Utilization, &out.Weights.Memory, &out.Weights.Video, &out.Weights.Power, &out.Weights.DRAMBandwidth}
		for i, f := range in.Weights.fields() {
			if *f != nil {
				*internal[i] = **f
			}
		}
	}
	if h := in.Health; h != nil {
		out.Health.Enabled = h.Enabled != nil && *h.Enabled
		out.Health.XIDWindow = durationOf(h.XIDWindow)
	}
}

// Convert_config_GPUTelemetryArgs_To_v1_GPUTelemetryArgs converts internal
// args to their user-facing form.
func Convert_config_GPUTelemetryArgs_To_v1_GPUTelemetryArgs(in *config.GPUTelemetryArgs, out *GPUTelemetryArgs) {
	p := in.Prometheus
	w := in.Weights
	enabled := in.Health.Enabled
	*out = GPUTelemetryArgs{
		Prometheus: &PrometheusSource{Address: p.Address, BearerTokenFile: p.BearerTokenFile,
			BasicAuthUsername: p.BasicAuthUsername, BasicAuthPasswordFile: p.BasicAuthPasswordFile, CAFile: p.CAFile,
			InsecureSkipVerify: p.InsecureSkipVerify, NodeLabel: p.NodeLabel, Selector: p.Selector},
		RefreshInterval:   copyDuration(&in.RefreshInterval),
		QueryTimeout:      copyDuration(&in.QueryTimeout),
		MaxAge:            copyDuration(&in.MaxAge),
		SensitivityFactor: copyInt(&in.SensitivityFactor),
		Weights: &TelemetryWeights{StaticMemory: copyInt(&w.StaticMemory), StaticBandwidth: copyInt(&w.StaticBandwidth),
			StaticCompute: copyInt(&w.StaticCompute), Utilization: copyInt(&w.Utilization), Memory: copyInt(&w.Memory),
			Video: copyInt(&w.Video), Power: copyInt(&w.Power), DRAMBandwidth: copyInt(&w.DRAMBandwidth)},
		Health: &HealthFilter{Enabled: &enabled, XIDWindow: copyDuration(&in.Health.XIDWindow)},
	}
}

func durationOf(d *metav1.Duration) metav1.Duration {
	if d == nil {
		return metav1.Duration{}
	}
	return *d
}

func addTelemetryConversions(s *runtime.Scheme) error {
	if err := s.AddConversionFunc((*GPUTelemetryArgs)(nil), (*config.GPUTelemetryArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs(a.(*GPUTelemetryArgs), b.(*config.GPUTelemetryArgs))
		return nil
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*config.GPUTelemetryArgs)(nil), (*GPUTelemetryArgs)(nil), func(a, b any, _ conversion.Scope) error {
		Convert_config_GPUTelemetryArgs_To_v1_GPUTelemetryArgs(a.(*config.GPUTelemetryArgs), b.(*GPUTelemetryArgs))
		return nil
	})
}
