package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GPUTelemetryArgs configures the GPUTelemetry plugin: where DCGM metrics
// come from, how fresh they must be, how each signal weighs, and the health
// filter. See docs/telemetry.md.
type GPUTelemetryArgs struct {
	metav1.TypeMeta

	Prometheus PrometheusSource
	// RefreshInterval is the time between two reads of Prometheus.
	RefreshInterval metav1.Duration
	// QueryTimeout bounds one read.
	QueryTimeout metav1.Duration
	// MaxAge is how old a snapshot may be and still count; older is unknown.
	MaxAge metav1.Duration
	// Weights weigh the score's parts.
	Weights TelemetryWeights
	// SensitivityFactor multiplies the weights of the parts a pod says it is
	// sensitive to.
	SensitivityFactor int64
	// Health is the health filter.
	Health HealthFilter
}

// PrometheusSource is where and how to query Prometheus.
type PrometheusSource struct {
	Address               string
	BearerTokenFile       string
	BasicAuthUsername     string
	BasicAuthPasswordFile string
	CAFile                string
	InsecureSkipVerify    bool
	// NodeLabel is the sample label that holds the node name; "" accepts
	// Hostname and hostname.
	NodeLabel string
	// Selector is added to every series selector, e.g. `job="dcgm-exporter"`.
	Selector string
}

// TelemetryWeights weigh the parts of the telemetry score, 0..100 each.
type TelemetryWeights struct {
	StaticMemory, StaticBandwidth, StaticCompute     int64
	Utilization, Memory, Video, Power, DRAMBandwidth int64
}

// HealthFilter keeps pods off GPUs with recent XID errors or row-remap failures.
type HealthFilter struct {
	Enabled bool
	// XIDWindow is how far back an XID error counts.
	XIDWindow metav1.Duration
}

// DeepCopyInto copies a into out; the args hold no pointers or slices.
func (a *GPUTelemetryArgs) DeepCopyInto(out *GPUTelemetryArgs) { *out = *a }

// DeepCopyObject implements runtime.Object.
func (a *GPUTelemetryArgs) DeepCopyObject() runtime.Object {
	out := new(GPUTelemetryArgs)
	a.DeepCopyInto(out)
	return out
}
