package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GPUTelemetryArgs configures the GPUTelemetry plugin (docs/telemetry.md).
type GPUTelemetryArgs struct {
	metav1.TypeMeta `json:",inline"`

	// Prometheus is where the DCGM exporter's metrics are queried.
	Prometheus *PrometheusSource `json:"prometheus,omitempty"`
	// RefreshInterval is the time between two reads of Prometheus. Default: 15s.
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
	// QueryTimeout bounds one read; a slower Prometheus counts as failed.
	// Default: 2s.
	QueryTimeout *metav1.Duration `json:"queryTimeout,omitempty"`
	// MaxAge is how old the last successful read may be and still be used;
	// older telemetry is unknown: dynamic signals score neutral and the
	// health filter lets every GPU pass. Default: 1m.
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// Weights weigh each signal, 0..100. Default: utilization 3, memory 2,
	// video 1, power 1, dramBandwidth 1, static parts 0.
	Weights *TelemetryWeights `json:"weights,omitempty"`
	// SensitivityFactor multiplies the weights of the signals a pod names in
	// its gpusched.io/sensitive-to annotation, 1..100. Default: 4.
	SensitivityFactor *int64 `json:"sensitivityFactor,omitempty"`
	// Health keeps pods off GPUs with recent XID errors or row-remap failures.
	Health *HealthFilter `json:"health,omitempty"`
}

// PrometheusSource is where and how to query Prometheus.
type PrometheusSource struct {
	// Address is the server's base URL, e.g. http://prometheus.monitoring:9090.
	Address string `json:"address,omitempty"`
	// BearerTokenFile is a file holding a bearer token, read on every request.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// BasicAuthUsername and BasicAuthPasswordFile set HTTP basic auth.
	BasicAuthUsername     string `json:"basicAuthUsername,omitempty"`
	BasicAuthPasswordFile string `json:"basicAuthPasswordFile,omitempty"`
	// CAFile is a PEM bundle verifying an https server's certificate.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify disables certificate verification.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// NodeLabel is the sample label holding the node name. Default: ""
	// (accept Hostname, then hostname, as DCGM exporters set them).
	NodeLabel string `json:"nodeLabel,omitempty"`
	// Selector is added to every series selector, e.g. job="dcgm-exporter".
	Selector string `json:"selector,omitempty"`
}

// TelemetryWeights weigh the parts of the telemetry score, each 0..100; 0
// leaves a part out, and at least one must be positive.
type TelemetryWeights struct {
	// StaticMemory prefers GPUs with more memory (model table or node labels).
	StaticMemory *int64 `json:"staticMemory,omitempty"`
	// StaticBandwidth prefers models with more memory bandwidth.
	StaticBandwidth *int64 `json:"staticBandwidth,omitempty"`
	// StaticCompute prefers models with more FP16 tensor throughput.
	StaticCompute *int64 `json:"staticCompute,omitempty"`
	// Utilization prefers GPUs that are less busy (DCGM_FI_DEV_GPU_UTIL).
	Utilization *int64 `json:"utilization,omitempty"`
	// Memory prefers GPUs with more memory actually free (FB_USED/FB_FREE).
	Memory *int64 `json:"memory,omitempty"`
	// Video prefers GPUs whose encoder and decoder are less busy.
	Video *int64 `json:"video,omitempty"`
	// Power prefers GPUs further from their power limit.
	Power *int64 `json:"power,omitempty"`
	// DRAMBandwidth prefers GPUs whose memory interface is less busy
	// (DCGM_FI_PROF_DRAM_ACTIVE, when exported).
	DRAMBandwidth *int64 `json:"dramBandwidth,omitempty"`
}

// HealthFilter keeps pods off unhealthy GPUs.
type HealthFilter struct {
	// Enabled turns the filter on. Default: true.
	Enabled *bool `json:"enabled,omitempty"`
	// XIDWindow is how far back an XID error makes a GPU unhealthy. Default: 10m.
	XIDWindow *metav1.Duration `json:"xidWindow,omitempty"`
}

// DeepCopyInto copies a into out.
func (a *GPUTelemetryArgs) DeepCopyInto(out *GPUTelemetryArgs) {
	*out = *a
	if a.Prometheus != nil {
		p := *a.Prometheus
		out.Prometheus = &p
	}
	out.RefreshInterval = copyDuration(a.RefreshInterval)
	out.QueryTimeout = copyDuration(a.QueryTimeout)
	out.MaxAge = copyDuration(a.MaxAge)
	out.SensitivityFactor = copyInt(a.SensitivityFactor)
	if a.Weights != nil {
		w := *a.Weights
		for _, f := range w.fields() {
			*f = copyInt(*f)
		}
		out.Weights = &w
	}
	if a.Health != nil {
		h := HealthFilter{XIDWindow: copyDuration(a.Health.XIDWindow)}
		if a.Health.Enabled != nil {
			e := *a.Health.Enabled
			h.Enabled = &e
		}
		out.Health = &h
	}
}

// DeepCopyObject implements runtime.Object.
func (a *GPUTelemetryArgs) DeepCopyObject() runtime.Object {
	out := new(GPUTelemetryArgs)
	a.DeepCopyInto(out)
	return out
}

// fields lists the weights in a fixed order, for defaulting and copying.
func (w *TelemetryWeights) fields() []**int64 {
	return []**int64{&w.StaticMemory, &w.StaticBandwidth, &w.StaticCompute,
		&w.Utilization, &w.Memory, &w.Video, &w.Power, &w.DRAMBandwidth}
}

func copyDuration(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

func copyInt(i *int64) *int64 {
	if i == nil {
		return nil
	}
	c := *i
	return &c
}
