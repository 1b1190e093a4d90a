package policyservice

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The policy service's metrics, on the scheduler's (or the extender's)
// /metrics endpoint.
var (
	calls = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_calls_total",
		Help:           "Calls to the policy service, by result: ok, timeout, error or malformed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	callDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Name:           "gpusched_external_policy_call_duration_seconds",
		Help:           "Duration of one call to the policy service, answered or not.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 12),
		StabilityLevel: metrics.ALPHA,
	})
	fallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_fallbacks_total",
		Help:           "Pods the fallback policy scored because the policy service's answer was not used, by cause: timeout, error, malformed or circuit-open.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cause"})
	disagreements = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_disagreements_total",
		Help:           "Pods for which the policy service's best node is not among the fallback policy's best, by mode (Enforce or Shadow).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	compared = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_compared_total",
		Help:           "Pods for which the policy service's answer was compared with the fallback policy's, by mode; the denominator of disagreements.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	circuitOpen = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "gpusched_external_policy_circuit_open",
		Help:           "1 while the circuit breaker to the policy service is open (no calls are made), else 0.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(calls, callDuration, fallbacks, disagreements, compared, circuitOpen)
		for _, c := range causes {
			fallbacks.WithLabelValues(string(c))
		}
	})
}
