package extender

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/component-base/metrics"
)

// serverMetrics are the extender's Prometheus metrics, in a registry of
// their own (one per handler, so several extenders can run in one process, as
// in the end-to-end tests), served on /metrics with the Go runtime's and the
// process's.
type serverMetrics struct {
	registry metrics.KubeRegistry
	requests *metrics.CounterVec
	duration *metrics.HistogramVec
	binds    *metrics.CounterVec
}

// newServerMetrics returns the metrics; mayBind reports whether the
// extender binds now (it holds the leader lease, or needs none).
func newServerMetrics(mayBind func() bool) *serverMetrics {
	m := &serverMetrics{
		registry: metrics.NewKubeRegistry(),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      "gpusched",
			Subsystem:      "extender",
			Name:           "requests_total",
			Help:           "Extender API requests by verb (filter, prioritize, bind, preempt) and HTTP status code.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"verb", "code"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "gpusched",
			Subsystem: "extender",
			Name:      "request_duration_seconds",
			Help:      "Time to serve an extender API request, from reading the body to writing the answer, by verb.",
			// 50µs to ~3.3s.
			Buckets:        metrics.ExponentialBuckets(0.00005, 2, 17),
			StabilityLevel: metrics.ALPHA,
		}, []string{"verb"}),
		binds: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      "gpusched",
			Subsystem:      "extender",
			Name:           "binds_total",
			Help:           "Binds by result: bound, already-bound (an idempotent retry) or error.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
	}
	binder := metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Namespace:      "gpusched",
		Subsystem:      "extender",
		Name:           "binder",
		Help:           "1 while this instance binds pods (it holds the leader lease, or runs without leader election), else 0.",
		StabilityLevel: metrics.ALPHA,
	}, func() float64 {
		if mayBind() {
			return 1
		}
		return 0
	})
	m.registry.MustRegister(m.requests, m.duration, m.binds)
	m.registry.RawMustRegister(
		binder,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *serverMetrics) observe(verb string, code int, took time.Duration) {
	m.requests.WithLabelValues(verb, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(verb).Observe(took.Seconds())
}

func (m *serverMetrics) bind(result string) {
	m.binds.WithLabelValues(result).Inc()
}

func (m *serverMetrics) handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
