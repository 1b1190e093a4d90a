package v1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func boolPtr(b bool) *bool { return &b }

func TestSetDefaultsGPUTelemetryArgs(t *testing.T) {
	defaultWeights := func() *TelemetryWeights {
		return &TelemetryWeights{StaticMemory: ptr(0), StaticBandwidth: ptr(0), StaticCompute: ptr(0),
			Utilization: ptr(3), Memory: ptr(2), Video: ptr(1), Power: ptr(1), DRAMBandwidth: ptr(1)}
	}
	tests := []struct {
		name string
		in   GPUTelemetryArgs
		want GPUTelemetryArgs
	}{
		{
			name: "empty args",
			in:   GPUTelemetryArgs{},
			want: GPUTelemetryArgs{Prometheus: &PrometheusSource{}, RefreshInterval: dur(15 * time.Second), QueryTimeout: dur(2 * time.Second),
				MaxAge: dur(time.Minute), Weights: defaultWeights(), SensitivityFactor: ptr(4),
				Health: &HealthFilter{Enabled: boolPtr(true), XIDWindow: dur(10 * time.Minute)}},
		},
		{
			name: "set values are kept, a weight of 0 included; the rest defaulted",
			in: GPUTelemetryArgs{Prometheus: &PrometheusSource{Address: "http://127.0.0.1:9090"}, MaxAge: dur(5 * time.Minute),
				Weights: &TelemetryWeights{Utilization: ptr(0), StaticCompute: ptr(7)}, Health: &HealthFilter{Enabled: boolPtr(false)}},
			want: GPUTelemetryArgs{Prometheus: &PrometheusSource{Address: "http://127.0.0.1:9090"}, RefreshInterval: dur(15 * time.Second),
				QueryTimeout: dur(2 * time.Second), MaxAge: dur(5 * time.Minute),
				Weights: &TelemetryWeights{StaticMemory: ptr(0), StaticBandwidth: ptr(0), StaticCompute: ptr(7),
					Utilization: ptr(0), Memory: ptr(2), Video: ptr(1), Power: ptr(1), DRAMBandwidth: ptr(1)},
				SensitivityFactor: ptr(4), Health: &HealthFilter{Enabled: boolPtr(false), XIDWindow: dur(10 * time.Minute)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.DeepCopyObject().(*GPUTelemetryArgs)
			SetDefaults_GPUTelemetryArgs(got)
			if !reflect.DeepEqual(got, &tt.want) {
				t.Errorf("got %+v, want %+v", got, &tt.want)
			}
			// The input is untouched (DeepCopy copies every pointer).
			if tt.in.Weights != nil && tt.in.Weights.Memory != nil {
				t.Errorf("defaulting the copy changed the input")
			}
		})
	}
}

// TestTelemetryConversionRoundTrip: defaulted args convert to internal and
// back unchanged.
func TestTelemetryConversionRoundTrip(t *testing.T) {
	in := GPUTelemetryArgs{Prometheus: &PrometheusSource{Address: "https://127.0.0.1:9091", BearerTokenFile: "/t", NodeLabel: "node", Selector: `job="dcgm"`},
		Weights: &TelemetryWeights{StaticBandwidth: ptr(5)}}
	SetDefaults_GPUTelemetryArgs(&in)
	var internal config.GPUTelemetryArgs
	Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs(&in, &internal)
	if internal.Weights.StaticBandwidth != 5 || internal.Weights.Utilization != 3 || !internal.Health.Enabled ||
		internal.Prometheus.Selector != `job="dcgm"` || internal.MaxAge.Duration != time.Minute {
		t.Errorf("internal %+v", internal)
	}
	var back GPUTelemetryArgs
	Convert_config_GPUTelemetryArgs_To_v1_GPUTelemetryArgs(&internal, &back)
	if !reflect.DeepEqual(&back, &in) {
		t.Errorf("round trip: got %+v, want %+v", back, in)
	}
}
