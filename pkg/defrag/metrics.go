package defrag

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the defragmenter's Prometheus series.
type Metrics struct {
	// plans counts plans by mode and result: planned (DryRun), started,
	// done, stopped (an eviction refused), expired (its pods did not
	// arrive in time), no-plan.
	plans *prometheus.CounterVec
	// moves counts the pods moved (Enforce) or that would be (DryRun).
	moves *prometheus.CounterVec
	// gpuMilli counts the GPU, in milli-GPU, that finished plans placed.
	gpuMilli prometheus.Counter
	// active is 1 while a plan is being carried out.
	active prometheus.Gauge
}

// NewMetrics registers the defragmenter's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpusched_defrag_plans_total",
			Help: "Migration plans by mode and result: planned (DryRun), started, done, stopped, expired, no-plan."}, []string{"mode", "result"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpusched_defrag_moves_total",
			Help: "Pods evicted to be moved (Enforce), or that would be (DryRun)."}, []string{"mode"}),
		gpuMilli: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpusched_defrag_gpu_milli_placed_total",
			Help: "GPU, in milli-GPU, of the pending pods that finished plans placed."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpusched_defrag_active_plans",
			Help: "Migration plans being carried out (0 or 1)."}),
	}
	reg.MustRegister(m.plans, m.moves, m.gpuMilli, m.active)
	return m
}
