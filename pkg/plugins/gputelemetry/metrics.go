package gputelemetry

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// gpusched's telemetry metrics, on the scheduler's /metrics endpoint.
var (
	telemetryAge = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "gpusched_telemetry_age_seconds",
		Help:           "Age of the GPU telemetry snapshot the scheduler scores with, at the last refresh or scheduling cycle.",
		StabilityLevel: metrics.ALPHA,
	})
	telemetryStale = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "gpusched_telemetry_stale",
		Help:           "1 when the GPU telemetry snapshot is missing or older than maxAge, so pods are placed on allocation alone; else 0.",
		StabilityLevel: metrics.ALPHA,
	})
	refreshTotal = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "gpusched_telemetry_refreshes_total",
		Help:           "Reads of GPU telemetry from Prometheus, successful or not.",
		StabilityLevel: metrics.ALPHA,
	})
	refreshErrors = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "gpusched_telemetry_refresh_errors_total",
		Help:           "Reads of GPU telemetry from Prometheus that failed or timed out.",
		StabilityLevel: metrics.ALPHA,
	})
	refreshDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Name:           "gpusched_telemetry_refresh_duration_seconds",
		Help:           "Duration of one read of GPU telemetry from Prometheus.",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 8),
		StabilityLevel: metrics.ALPHA,
	})
	signalScore = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "gpusched_telemetry_signal_score",
		Help:           "Rating (0 worst, 1 best) of each signal of the telemetry score, per scored node, averaged over the GPUs the pod would take.",
		Buckets:        metrics.LinearBuckets(0.1, 0.1, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"signal"})
)

var registerOnce sync.Once

// partObservers are signalScore's children, resolved once.
var partObservers [telemetry.NumParts]metrics.ObserverMetric

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(telemetryAge, telemetryStale, refreshTotal, refreshErrors, refreshDuration, signalScore)
		for p := range telemetry.NumParts {
			partObservers[p] = signalScore.WithLabelValues(p.String())
		}
	})
}
