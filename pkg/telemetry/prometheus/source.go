// Package prometheus is a telemetry.Source that reads DCGM exporter metrics
// from the Prometheus HTTP API. A background refresher queries Prometheus on
// an interval, each query bounded by a timeout, and publishes a snapshot;
// the scheduler only ever reads the last published snapshot, so a slow or
// stopped Prometheus never delays a scheduling cycle.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// Config configures a Source.
type Config struct {
	// Address is the Prometheus server's base URL, e.g. "http://prometheus:9090".
	Address string
	// Auth is authentication and TLS; the zero value is no auth and the
	// system's CAs.
	Auth Auth
	// RefreshInterval is the time between refreshes.
	RefreshInterval time.Duration
	// QueryTimeout bounds one refresh (all of its queries).
	QueryTimeout time.Duration
	// HealthWindow is how far back an XID error makes a GPU unhealthy.
	HealthWindow time.Duration
	// NodeLabels are the labels naming a sample's node, first non-empty wins;
	// empty means DefaultNodeLabels.
	NodeLabels []string
	// Selector, when set, is added to every series selector, e.g.
	// `job="dcgm-exporter"`, to read one exporter among several.
	Selector string
	// Observe, when set, is called after every refresh with its duration and
	// error (nil on success) and the snapshot (nil on error).
	Observe func(d time.Duration, snap *telemetry.Snapshot, err error)
}

// Source reads DCGM metrics from Prometheus. See the package comment.
type Source struct {
	cfg    Config
	api    promv1.API
	latest atomic.Pointer[telemetry.Snapshot]
	// queries are the instant queries of one refresh: the gauge signals by
	// name, and the XID errors over the health window.
	gauges, xid string
}

var _ telemetry.Source = (*Source)(nil)

// gaugeSignals are read at their latest value; XIDErrors is read over the
// health window instead.
var gaugeSignals = []telemetry.Signal{telemetry.GPUUtil, telemetry.FBUsed, telemetry.FBFree,
	telemetry.PowerUsage, telemetry.PowerLimit, telemetry.EncUtil, telemetry.DecUtil, telemetry.DRAMActive,
	telemetry.RowRemapFailure, telemetry.UncorrectableRemappedRows}

// New returns a Source for cfg. It does not contact Prometheus; Run does.
func New(cfg Config) (*Source, error) {
	if cfg.Address == "" {
		return nil, errors.New("prometheus address is empty: want a URL such as http://prometheus.monitoring:9090")
	}
	if cfg.RefreshInterval <= 0 || cfg.QueryTimeout <= 0 || cfg.HealthWindow <= 0 {
		return nil, fmt.Errorf("refresh interval %v, query timeout %v and health window %v must all be positive",
			cfg.RefreshInterval, cfg.QueryTimeout, cfg.HealthWindow)
	}
	if len(cfg.NodeLabels) == 0 {
		cfg.NodeLabels = DefaultNodeLabels
	}
	rt, err := cfg.Auth.roundTripper()
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", cfg.Address, err)
	}
	client, err := api.NewClient(api.Config{Address: cfg.Address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", cfg.Address, err)
	}
	names := make([]string, len(gaugeSignals))
	for i, s := range gaugeSignals {
		names[i] = s.Metric()
	}
	sel := ""
	if cfg.Selector != "" {
		sel = "," + cfg.Selector
	}
	return &Source{
		cfg:    cfg,
		api:    promv1.NewAPI(client),
		gauges: fmt.Sprintf(`{__name__=~"%s"%s}`, strings.Join(names, "|"), sel),
		xid:    fmt.Sprintf(`max_over_time(%s{%s}[%s])`, telemetry.XIDErrors.Metric(), strings.TrimPrefix(sel, ","), model.Duration(cfg.HealthWindow)),
	}, nil
}

// Latest implements telemetry.Source: the last snapshot taken, nil before the
// first. It never blocks.
func (s *Source) Latest() *telemetry.Snapshot { return s.latest.Load() }

// Run refreshes at once and then every RefreshInterval until ctx is done. A
// failed refresh keeps the previous snapshot, which ages until it is stale.
func (s *Source) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("prometheus", s.cfg.Address)
	ticker := time.NewTicker(s.cfg.RefreshInterval)
	defer ticker.Stop()
	failing := false
	for {
		err := s.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			logger.Error(err, "GPU telemetry refresh failed; scoring goes on with the last snapshot until it is stale")
		case err != nil:
			logger.V(4).Info("GPU telemetry refresh failed again", "err", err)
		case failing:
			logger.Info("GPU telemetry refresh succeeded again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Refresh queries Prometheus once, within QueryTimeout, and publishes the
// snapshot on success.
func (s *Source) Refresh(ctx context.Context) error {
	start := time.Now()
	snap, err := s.query(ctx, start)
	if err == nil {
		s.latest.Store(snap)
	}
	if s.cfg.Observe != nil {
		s.cfg.Observe(time.Since(start), snap, err)
	}
	return err
}

func (s *Source) query(ctx context.Context, now time.Time) (*telemetry.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	b := newBuilder(s.cfg.NodeLabels)
	gauges, err := s.vector(ctx, s.gauges, now)
	if err != nil {
		return nil, err
	}
	b.add(logger, gauges, nil)
	xids, err := s.vector(ctx, s.xid, now)
	if err != nil {
		return nil, err
	}
	xid := telemetry.XIDErrors
	b.add(logger, xids, &xid)
	return &telemetry.Snapshot{Time: now, Nodes: b.nodes, HealthWindow: s.cfg.HealthWindow}, nil
}

// vector runs an instant query that must return a vector.
func (s *Source) vector(ctx context.Context, q string, now time.Time) (model.Vector, error) {
	v, warnings, err := s.api.Query(ctx, q, now, promv1.WithTimeout(s.cfg.QueryTimeout))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	if len(warnings) > 0 {
		klog.FromContext(ctx).V(4).Info("Prometheus warnings", "query", q, "warnings", warnings)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: want a vector, got %s", q, v.Type())
	}
	return vec, nil
}
