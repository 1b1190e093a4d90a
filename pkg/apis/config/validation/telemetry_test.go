package validation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

func TestValidateGPUTelemetryArgs(t *testing.T) {
	valid := func() config.GPUTelemetryArgs {
		return config.GPUTelemetryArgs{
			Prometheus:      config.PrometheusSource{Address: "http://127.0.0.1:9090"},
			RefreshInterval: metav1.Duration{Duration: 15 * time.Second}, QueryTimeout: metav1.Duration{Duration: 2 * time.Second},
			MaxAge:            metav1.Duration{Duration: time.Minute},
			Weights:           config.TelemetryWeights{Utilization: 3, Memory: 2},
			SensitivityFactor: 4,
			Health:            config.HealthFilter{Enabled: true, XIDWindow: metav1.Duration{Duration: 10 * time.Minute}},
		}
	}
	tests := []struct {
		name   string
		modify func(*config.GPUTelemetryArgs)
		want   []string
	}{
		{name: "valid", modify: func(*config.GPUTelemetryArgs) {}},
		{name: "no address is valid (the simulator replays a file)", modify: func(a *config.GPUTelemetryArgs) { a.Prometheus.Address = "" }},
		{name: "address not a URL", modify: func(a *config.GPUTelemetryArgs) { a.Prometheus.Address = "prometheus:9090" },
			want: []string{"args.prometheus.address: Invalid value"}},
		{name: "two kinds of auth, password without user", modify: func(a *config.GPUTelemetryArgs) {
			a.Prometheus.BearerTokenFile = "/t"
			a.Prometheus.BasicAuthPasswordFile = "/p"
		}, want: []string{"args.prometheus.basicAuthUsername: Required value"}},
		{name: "bearer and basic", modify: func(a *config.GPUTelemetryArgs) {
			a.Prometheus.BearerTokenFile = "/t"
			a.Prometheus.BasicAuthUsername = "u"
		}, want: []string{"args.prometheus.bearerTokenFile: Invalid value"}},
		{name: "zero durations", modify: func(a *config.GPUTelemetryArgs) {
			a.RefreshInterval, a.QueryTimeout, a.MaxAge = metav1.Duration{}, metav1.Duration{}, metav1.Duration{}
		}, want: []string{"args.refreshInterval: Invalid value", "args.queryTimeout: Invalid value", "args.maxAge: Invalid value"}},
		{name: "max age below the refresh interval", modify: func(a *config.GPUTelemetryArgs) { a.MaxAge.Duration = time.Second },
			want: []string{"args.maxAge: Invalid value"}},
		{name: "weights out of range", modify: func(a *config.GPUTelemetryArgs) {
			a.Weights.Video, a.Weights.StaticCompute = -1, 101
		}, want: []string{"args.weights.staticCompute: Invalid value", "args.weights.video: Invalid value"}},
		{name: "every weight 0", modify: func(a *config.GPUTelemetryArgs) { a.Weights = config.TelemetryWeights{} },
			want: []string{"args.weights: Invalid value"}},
		{name: "sensitivity factor 0", modify: func(a *config.GPUTelemetryArgs) { a.SensitivityFactor = 0 },
			want: []string{"args.sensitivityFactor: Invalid value"}},
		{name: "XID window below 1s", modify: func(a *config.GPUTelemetryArgs) { a.Health.XIDWindow.Duration = time.Millisecond },
			want: []string{"args.health.xidWindow: Invalid value"}},
		{name: "XID window unchecked when health is off", modify: func(a *config.GPUTelemetryArgs) {
			a.Health = config.HealthFilter{}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := valid()
			tt.modify(&args)
			errs := ValidateGPUTelemetryArgs(field.NewPath("args"), &args)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+": "+e.Type.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors %v (%v), want %v", got, errs, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("error %d: %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}
