// Package metrics holds the node agent's Prometheus metrics. Every method is
// safe on a nil *Metrics (it then records nothing), so components can be
// built without metrics in tests.
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "gpusched_agent"

// Container outcomes, the "outcome" label of containers_total.
const (
	OutcomeGPUs     = "gpus"     // given the GPUs of its pod's assignment
	OutcomeNoGPUs   = "no_gpus"  // a pod without GPU demand: NVIDIA_VISIBLE_DEVICES=void
	OutcomeExempt   = "exempt"   // a pod annotated gpusched.io/gpu-unrestricted, left as it is
	OutcomeRejected = "rejected" // creation refused (see rejections_total)
)

// Metrics are the agent's metrics, registered in their own registry.
type Metrics struct {
	registry        *prometheus.Registry
	containers      *prometheus.CounterVec
	rejections      *prometheus.CounterVec
	discoveryErrors *prometheus.CounterVec
	xids            *prometheus.CounterVec
	devices         *prometheus.GaugeVec
	unverified      prometheus.Gauge
}

// New registers the agent's metrics, and the Go and process collectors, in a
// new registry.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		containers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "containers_total",
			Help: "Containers handled at NRI CreateContainer, by outcome: gpus, no_gpus, exempt, rejected.",
		}, []string{"outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rejections_total",
			Help: "Container creations refused, by reason (missing_assignment, malformed_assignment, foreign_node, unknown_gpu, no_inventory, duplicate_env, gpu_in_use, malformed_unrestricted).",
		}, []string{"reason"}),
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "discovery_errors_total",
			Help: "GPU discovery and publishing errors, by stage (nvml, gpu, inventory, node, patch, xid).",
		}, []string{"stage"}),
		xids: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "xid_events_total",
			Help: "NVML XID events, by XID and whether it marked the device unhealthy.",
		}, []string{"xid", "critical"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "devices",
			Help: "Devices in the published inventory, by health (healthy, unhealthy).",
		}, []string{"health"}),
		unverified: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "unverified_containers",
			Help: "Running containers found at NRI Synchronize whose GPU environment differs from what the agent would have given them (created while the agent was not running).",
		}),
	}
	m.registry.MustRegister(m.containers, m.rejections, m.discoveryErrors, m.xids, m.devices, m.unverified,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Registry is the registry the metrics live in.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// ContainerHandled counts one container by outcome (Outcome*).
func (m *Metrics) ContainerHandled(outcome string) {
	if m != nil {
		m.containers.WithLabelValues(outcome).Inc()
	}
}

// Rejected counts one refused container creation by reason.
func (m *Metrics) Rejected(reason string) {
	if m != nil {
		m.containers.WithLabelValues(OutcomeRejected).Inc()
		m.rejections.WithLabelValues(reason).Inc()
	}
}

// DiscoveryError counts one discovery or publishing error by stage.
func (m *Metrics) DiscoveryError(stage string) {
	if m != nil {
		m.discoveryErrors.WithLabelValues(stage).Inc()
	}
}

// XID counts one XID event.
func (m *Metrics) XID(xid uint64, critical bool) {
	if m != nil {
		m.xids.WithLabelValues(strconv.FormatUint(xid, 10), strconv.FormatBool(critical)).Inc()
	}
}

// SetDevices records the published inventory's size by health.
func (m *Metrics) SetDevices(healthy, unhealthy int) {
	if m != nil {
		m.devices.WithLabelValues("healthy").Set(float64(healthy))
		m.devices.WithLabelValues("unhealthy").Set(float64(unhealthy))
	}
}

// SetUnverified records how many running containers Synchronize found with a
// GPU environment the agent did not give them.
func (m *Metrics) SetUnverified(n int) {
	if m != nil {
		m.unverified.Set(float64(n))
	}
}
