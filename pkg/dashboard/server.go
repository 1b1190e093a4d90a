// Package dashboard serves a live view of a cluster's GPUs: a web page that
// draws every node and GPU, the pending GPU pods and why they wait, and the
// cluster's fragmentation and allocation over time; the same snapshot as
// JSON and Server-Sent Events; and as Prometheus metrics for Grafana.
//
// It only reads the cluster: shared informers list and watch Nodes and
// Pods, and the DRA objects where it may read them, and the snapshot is gpuview's, computed with the engine (pkg/gpu),
// so it shows what the scheduler computes. It does not import
// k8s.io/kubernetes. It serves without authentication of its own: expose it
// behind kube-rbac-proxy, `kubectl port-forward` or the API server's service
// proxy (see docs/dashboard.md).
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Options configure a Server. The zero value is usable: every field has a
// default.
type Options struct {
	// SchedulerNames, when set, limits the pending pods shown to those of
	// these schedulers.
	SchedulerNames []string
	// PoolLabel, when set, is the node label that names a node's pool
	// (default: gpuview.PoolLabels).
	PoolLabel string
	// PerGPUMetrics exports the per-GPU series (gpusched_gpu_*), one per
	// GPU and metric; leave it off on clusters too large for them.
	PerGPUMetrics bool
	// MinInterval is the least time between two rebuilds of the snapshot:
	// changes within it are coalesced into one rebuild (default 1s).
	MinInterval time.Duration
	// SampleEvery is the interval of the fragmentation and allocation time
	// series (default 10s); HistoryLen the samples kept (default 360).
	SampleEvery time.Duration
	HistoryLen  int
	// MaxPending caps the pending pods listed in /api/snapshot (default
	// 1000); the counts cover them all.
	MaxPending int
	// KeepAlive is the interval of comments on an idle event stream, which
	// keep proxies from closing it (default 15s).
	KeepAlive time.Duration
	// DRADriver names the DRA driver whose devices are GPUs (default:
	// NVIDIA's). Where the API server serves resource.k8s.io/v1 and the
	// dashboard may read it, nodes that publish the driver's devices show
	// them, held by ResourceClaims (gpuview.DRA).
	DRADriver string
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.MinInterval, time.Second)
	def(&o.SampleEvery, 10*time.Second)
	def(&o.KeepAlive, 15*time.Second)
	if o.HistoryLen <= 0 {
		o.HistoryLen = 360
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 1000
	}
}

// Server is the dashboard: a State kept current from the cluster, and the
// HTTP handlers that serve it.
type Server struct {
	opts     Options
	client   kubernetes.Interface
	state    *State
	registry *prometheus.Registry
}

// New returns a dashboard of the cluster client talks to. client may be nil
// for a server whose snapshots are given with Publish (tests, benchmarks);
// Run needs one.
func New(client kubernetes.Interface, opts Options) *Server {
	opts.defaults()
	s := &Server{opts: opts, client: client, state: NewState(opts.HistoryLen, opts.SampleEvery, opts.MaxPending),
		registry: prometheus.NewRegistry()}
	s.registry.MustRegister(NewCollector(s.state, opts.PerGPUMetrics),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// State is the server's state.
func (s *Server) State() *State { return s.state }

// Publish builds the snapshot of nodes and pods with the server's options
// and makes it current; it returns the new version.
func (s *Server) Publish(nodes []*v1.Node, pods []*v1.Pod) uint64 {
	return s.state.Publish(s.build(nodes, pods, nil), time.Now())
}

func (s *Server) build(nodes []*v1.Node, pods []*v1.Pod, dra *gpuview.DRA) *gpuview.Snapshot {
	return gpuview.Build(nodes, pods, gpuview.Options{SchedulerNames: s.opts.SchedulerNames, PoolLabel: s.opts.PoolLabel, DRA: dra})
}

// Run watches Nodes and Pods (and the DRA objects, draInformers) and keeps
// the state current until ctx ends:
// it waits for the informers' first lists, publishes a snapshot, and then
// rebuilds after changes, at most once per MinInterval. It never writes to
// the cluster.
func (s *Server) Run(ctx context.Context) error {
	if s.client == nil {
		return errors.New("dashboard: no client to watch the cluster with")
	}
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactory(s.client, 0)
	nodeInformer, podInformer := factory.Core().V1().Nodes(), factory.Core().V1().Pods()
	dirty := make(chan struct{}, 1)
	markDirty := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { markDirty() },
		UpdateFunc: func(_, _ any) { markDirty() },
		DeleteFunc: func(any) { markDirty() },
	}
	watched := []cache.SharedIndexInformer{nodeInformer.Informer(), podInformer.Informer()}
	dra, err := s.draInformers(ctx, factory)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if dra != nil {
		watched = append(watched, dra.watched...)
	}
	for _, inf := range watched {
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("dashboard: the %v informer did not sync: %w", typ, context.Cause(ctx))
		}
	}
	logger.Info("Dashboard informers synced")

	nodes, pods := nodeInformer.Lister(), podInformer.Lister()
	rebuild := func() {
		defer func() {
			if r := recover(); r != nil { // keep serving the last snapshot, and say why it is old
				logger.Error(nil, "Rebuilding the GPU snapshot failed", "panic", r)
				s.state.Failed(fmt.Errorf("rebuilding the snapshot failed: %v", r))
			}
		}()
		ns, err := nodes.List(labels.Everything())
		if err != nil {
			s.state.Failed(err)
			return
		}
		ps, err := pods.List(labels.Everything())
		if err != nil {
			s.state.Failed(err)
			return
		}
		objects, err := dra.list()
		if err != nil {
			s.state.Failed(err)
			return
		}
		v := s.state.Publish(s.build(ns, ps, objects), time.Now())
		logger.V(4).Info("Published GPU snapshot", "version", v, "nodes", len(ns), "pods", len(ps))
	}
	rebuild()

	tick := time.NewTicker(s.opts.SampleEvery)
	defer tick.Stop()
	var next time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			s.state.Tick(now)
		case <-dirty:
			if wait := time.Until(next); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
			rebuild()
			next = time.Now().Add(s.opts.MinInterval)
		}
	}
}

// dropManagedFields keeps the informers' caches small: the snapshot never
// reads managed fields.
func dropManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// ListenAndServe runs Run and serves the handlers on addr until ctx ends,
// then shuts the listener down. Run's error, or the listener's, is
// returned.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve is ListenAndServe on a listener the caller opened.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	klog.FromContext(ctx).Info("Dashboard serving", "address", "http://"+ln.Addr().String()+"/")

	runErr := s.Run(ctx)
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shutdownCtx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: %w", err)
	}
	return runErr
}
