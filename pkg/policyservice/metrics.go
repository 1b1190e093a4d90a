package policyservice

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// The policy service's metrics, on the scheduler's (or the extender's)
// /metrics endpoint.
var (
	calls = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_calls_total",
		Help:           "Calls to the policy service, by result: ok, timeout, error or malformed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "gpusched_external_policy_requests_total",
		Help:           "Requests sent to the policy service, by kind: whole, incremental (only the nodes changed since the request the service keeps) or resent (whole again, after the service answered that it no longer keeps the base).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
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
		legacyregistry.MustRegister(calls, requests, callDuration, fallbacks, disagreements, compared, circuitOpen)
		for _, c := range causes {
			fallbacks.WithLabelValues(string(c))
		}
		for _, k := range []string{kindWhole, kindIncremental, kindResent} {
			requests.WithLabelValues(k)
		}
	})
}

// The kinds of request the requests metric counts.
const (
	kindWhole       = "whole"
	kindIncremental = "incremental"
	kindResent      = "resent"
)

func requestKind(req *pb.ScoreRequest) string {
	if req.Base != 0 {
		return kindIncremental
	}
	return kindWhole
}
