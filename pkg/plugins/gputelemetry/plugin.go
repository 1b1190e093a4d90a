// Package gputelemetry is the GPUTelemetry kube-scheduler plugin: it scores
// nodes by live GPU telemetry (DCGM metrics read from Prometheus) and by the
// static specification of their GPU models, and keeps pods off GPUs that
// report XID errors or row-remap failures. It reads only the snapshot a
// background refresher keeps (pkg/telemetry/prometheus), so Prometheus being
// slow or down never delays a scheduling cycle: telemetry older than maxAge is
// unknown, and pods are placed on allocation alone.
//
// Which GPUs a pod gets is GPUPlacement's choice; the health filter tells it
// which to leave out through the cycle state (package internal/gpuhealth).
package gputelemetry

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuhealth"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
	"github.com/gpusched/gpusched/pkg/plugins/internal/normalize"
	"github.com/gpusched/gpusched/pkg/telemetry"
	"github.com/gpusched/gpusched/pkg/telemetry/prometheus"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUTelemetry"

// stateKey is where PreFilter leaves the cycle's telemetry for the pod.
const stateKey fwk.StateKey = "PreFilter" + Name

// GPUTelemetry scores nodes by GPU telemetry. See the package comment.
type GPUTelemetry struct {
	handle  fwk.Handle
	source  telemetry.Source
	now     func() time.Time
	maxAge  time.Duration
	weights telemetry.Weights
	factor  int64
	health  bool
	// logger is the scheduler's, for what happens outside a cycle (refreshes).
	logger klog.Logger

	// inventories caches each node's GPU inventory by resourceVersion.
	inventories sync.Map // node name -> *cachedInventory
	// scores memoizes node scores per snapshot and weighting.
	scores scoreCaches
	// stale is whether the last cycle found the telemetry stale, for logging
	// the transitions once.
	staleMu sync.Mutex
	stale   bool
}

var (
	_ fwk.PreFilterPlugin = &GPUTelemetry{}
	_ fwk.FilterPlugin    = &GPUTelemetry{}
	_ fwk.PreScorePlugin  = &GPUTelemetry{}
	_ fwk.ScorePlugin     = &GPUTelemetry{}
	_ fwk.ScoreExtensions = &GPUTelemetry{}
	_ fwk.SignPlugin      = &GPUTelemetry{}
)

// New builds the plugin from its args and starts the Prometheus refresher,
// which runs until ctx (the scheduler's) is done. args.prometheus.address is
// required.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := load.GPUTelemetryArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if args.Prometheus.Address == "" {
		return nil, fmt.Errorf("%s: args.prometheus.address is empty: want the URL of the Prometheus that scrapes dcgm-exporter, e.g. http://prometheus.monitoring:9090", Name)
	}
	registerMetrics()
	telemetryStale.Set(1) // no snapshot yet
	var labels []string
	if args.Prometheus.NodeLabel != "" {
		labels = []string{args.Prometheus.NodeLabel}
	}
	p := newPlugin(args, h, nil, time.Now)
	p.logger = klog.FromContext(ctx).WithValues("plugin", Name)
	src, err := prometheus.New(prometheus.Config{
		Address: args.Prometheus.Address,
		Auth: prometheus.Auth{BearerTokenFile: args.Prometheus.BearerTokenFile, BasicAuthUsername: args.Prometheus.BasicAuthUsername,
			BasicAuthPasswordFile: args.Prometheus.BasicAuthPasswordFile, CAFile: args.Prometheus.CAFile, InsecureSkipVerify: args.Prometheus.InsecureSkipVerify},
		RefreshInterval: args.RefreshInterval.Duration,
		QueryTimeout:    args.QueryTimeout.Duration,
		HealthWindow:    args.Health.XIDWindow.Duration,
		NodeLabels:      labels,
		Selector:        args.Prometheus.Selector,
		Observe:         p.observeRefresh,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	p.source = src
	go src.Run(klog.NewContext(ctx, p.logger))
	return p, nil
}

// NewWithSource returns a factory for a plugin that reads telemetry from src,
// with now as its clock, ignoring the args' Prometheus settings: the
// simulator replays recorded telemetry this way.
func NewWithSource(src telemetry.Source, now func() time.Time) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		args, err := load.GPUTelemetryArgs(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		registerMetrics()
		telemetryStale.Set(1)
		p := newPlugin(args, h, src, now)
		p.logger = klog.FromContext(ctx).WithValues("plugin", Name)
		return p, nil
	}
}

func newPlugin(args *config.GPUTelemetryArgs, h fwk.Handle, src telemetry.Source, now func() time.Time) *GPUTelemetry {
	w := args.Weights
	return &GPUTelemetry{
		handle: h, source: src, now: now,
		maxAge: args.MaxAge.Duration,
		weights: telemetry.Weights{
			telemetry.StaticMemory: w.StaticMemory, telemetry.StaticBandwidth: w.StaticBandwidth, telemetry.StaticCompute: w.StaticCompute,
			telemetry.Utilization: w.Utilization, telemetry.Memory: w.Memory, telemetry.Video: w.Video,
			telemetry.Power: w.Power, telemetry.DRAM: w.DRAMBandwidth,
		},
		factor: args.SensitivityFactor,
		health: args.Health.Enabled,
		stale:  true, // until the first snapshot arrives
	}
}

// observeRefresh records a refresh in the metrics.
func (p *GPUTelemetry) observeRefresh(d time.Duration, _ *telemetry.Snapshot, err error) {
	refreshTotal.Inc()
	refreshDuration.Observe(d.Seconds())
	if err != nil {
		refreshErrors.Inc()
	}
	p.freshSnapshot(p.logger)
}

// Name implements fwk.Plugin.
func (p *GPUTelemetry) Name() string { return Name }

// cycleState is the pod's telemetry inputs for one cycle.
type cycleState struct {
	// snap is the fresh snapshot, nil when telemetry is stale or missing.
	snap *telemetry.Snapshot
	// health is the health view, nil when the filter is off or snap is nil.
	health *telemetry.Health
	// weights are the args' weights, reweighted by the pod's sensitivity.
	weights telemetry.Weights
	// count is the number of GPUs the pod takes.
	count int
	// scores is where Score memoizes node scores for this weighting.
	scores *scoreCache
}

// Clone implements fwk.StateData; cycleState is never modified after PreFilter.
func (s *cycleState) Clone() fwk.StateData { return s }

// freshSnapshot returns the source's snapshot if it is fresh, updating the
// age and staleness metrics and logging when telemetry turns stale or fresh.
func (p *GPUTelemetry) freshSnapshot(logger klog.Logger) *telemetry.Snapshot {
	snap, age := telemetry.Fresh(p.source, p.now(), p.maxAge)
	if p.source != nil && p.source.Latest() != nil {
		telemetryAge.Set(age.Seconds())
	}
	stale := snap == nil
	if stale {
		telemetryStale.Set(1)
	} else {
		telemetryStale.Set(0)
	}
	p.staleMu.Lock()
	changed := stale != p.stale
	p.stale = stale
	p.staleMu.Unlock()
	if changed {
		if stale {
			logger.Info("GPU telemetry is stale: placing pods on allocation alone until it is fresh again", "maxAge", p.maxAge)
		} else {
			logger.Info("GPU telemetry is fresh again")
		}
	}
	return snap
}

// PreFilter takes the cycle's snapshot, and the pod's weights from its
// sensitivity annotation. A pod without GPU demand, or with a malformed
// demand (GPUPlacement reports it), skips the plugin. A malformed
// sensitivity annotation is reported in an event on the pod, and the pod is
// scored with the configured weights. When the health filter is on and
// telemetry is fresh, it records the health view for GPUPlacement to choose
// healthy GPUs only; otherwise the plugin's Filter is skipped.
func (p *GPUTelemetry) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	demand, ok := cycleDemand(state, pod)
	if !ok || demand.IsZero() {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	weights, err := telemetry.Sensitize(p.weights, pod.Annotations[telemetry.AnnotationSensitiveTo], p.factor)
	if err != nil {
		p.reportSensitivity(ctx, pod, err)
	}
	s := &cycleState{snap: p.freshSnapshot(klog.FromContext(ctx)), weights: weights, count: demand.Count}
	s.scores = p.scores.get(s.snap, &s.weights, s.count)
	if p.health && s.snap != nil {
		s.health = &telemetry.Health{Snap: s.snap}
		gpuhealth.Write(state, s.health)
	}
	state.Write(stateKey, s)
	if s.health == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// reportSensitivity records a Warning event on a pod whose sensitivity
// annotation is malformed. The pod is normally placed in the same cycle; a
// pod that cycles again repeats an identical event, which the event recorder
// folds into a series.
func (p *GPUTelemetry) reportSensitivity(ctx context.Context, pod *v1.Pod, err error) {
	klog.FromContext(ctx).V(2).Info("Ignoring malformed sensitivity annotation", "pod", klog.KObj(pod), "err", err)
	if recorder := p.handle.EventRecorder(); recorder != nil {
		recorder.Eventf(pod, nil, v1.EventTypeWarning, "InvalidSensitivity", "Scheduling",
			"%v; scheduling with the configured weights", err)
	}
}

// PreFilterExtensions implements fwk.PreFilterPlugin; there are none.
func (p *GPUTelemetry) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func stateOf(state fwk.CycleState) *cycleState {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	return data.(*cycleState)
}

// Filter rejects a node that has fewer healthy GPUs than the pod takes,
// naming the unhealthy GPUs and why. A node with enough healthy GPUs passes;
// GPUPlacement then gives the pod healthy ones only. The node's GPU count is
// its allocatable nvidia.com/gpu; a node that does not advertise one passes.
func (p *GPUTelemetry) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s := stateOf(state)
	if s == nil || s.health == nil {
		return nil
	}
	node := nodeInfo.Node()
	bad, why := s.health.UnhealthyCount(node.Name)
	if bad == 0 {
		return nil
	}
	total := nodeInfo.GetAllocatable().GetScalarResources()[gpu.ResourceGPU]
	if total == 0 || total-int64(bad) >= int64(s.count) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "too few healthy GPUs ("+why+")")
}

// PreScore skips scoring for a pod PreFilter skipped.
func (p *GPUTelemetry) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if stateOf(state) == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is the node's telemetry-weighted score in 0..gpu.MaxScore
// (telemetry.ScoreNode) over the GPUs the health filter does not exclude;
// NormalizeScore rescales it. With stale telemetry only the static parts
// differ between nodes. Scores are memoized per snapshot, weighting and GPU
// count (scoreCache), and computed again when the node object changes.
func (p *GPUTelemetry) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s := stateOf(state)
	if s == nil {
		return 0, nil
	}
	node := nodeInfo.Node()
	if score, ok := s.scores.lookup(node.Name, node.ResourceVersion); ok {
		return score, nil
	}
	inv := p.inventory(node)
	if inv == nil {
		return gpu.MaxScore / 2, nil
	}
	var skip gpu.DeviceSet
	if s.health != nil {
		skip, _ = s.health.Excluded(node.Name, inv)
	}
	res := telemetry.ScoreNode(inv.Devices, s.snap.Node(node.Name), s.count, skip, &s.weights)
	// Observed once per node, snapshot and weighting, as computed.
	for part, r := range res.Parts {
		if s.weights[part] > 0 {
			partObservers[part].Observe(r)
		}
	}
	s.scores.store(node.Name, node.ResourceVersion, res.Score)
	return res.Score, nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *GPUTelemetry) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore rescales scores to 0..100, min-max over the feasible nodes
// (gpu.RescaleMinMax), so telemetry decides among nodes however little they differ,
// in proportion to the plugin's weight in the profile.
func (p *GPUTelemetry) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalize.Rescale(scores, gpu.RescaleMinMax)
	return nil
}

// cycleDemand is the pod's GPU demand as GPUPlacement's PreFilter read it
// earlier in the cycle (gpuledger), or, in a cycle where it has not run,
// read from the pod; ok is false for a malformed demand, or a pod
// GPUPlacement skipped.
func cycleDemand(state fwk.CycleState, pod *v1.Pod) (gpu.Demand, bool) {
	if l := gpuledger.Read(state); l != nil {
		if d, ok := l.Demand(state); ok {
			return *d, true
		}
		return gpu.Demand{}, false
	}
	d, err := gpu.DemandFromPod(pod)
	return d, err == nil
}

// SignPod lets opportunistic batching treat pods alike when they take the same
// number of GPUs and state the same sensitivity: the plugin's decisions depend
// on the pod through nothing else.
func (p *GPUTelemetry) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	demand, err := gpu.DemandFromPod(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	return []fwk.SignFragment{{
		Key:   "gpusched.io/GPUTelemetry",
		Value: [2]any{demand.Count, pod.Annotations[telemetry.AnnotationSensitiveTo]},
	}}, nil
}

// cachedInventory is a node's inventory as of one resourceVersion.
type cachedInventory struct {
	resourceVersion string
	inv             *gpu.Inventory
}

// inventory is the node's GPU inventory, read again only when the node
// changes; nil when the node's GPU labels are malformed (GPUPlacement reports
// that).
func (p *GPUTelemetry) inventory(node *v1.Node) *gpu.Inventory {
	if c, ok := p.inventories.Load(node.Name); ok {
		if c := c.(*cachedInventory); c.resourceVersion == node.ResourceVersion && node.ResourceVersion != "" {
			return c.inv
		}
	}
	inv, err := gpu.InventoryFromNode(node)
	if err != nil {
		inv = nil
	}
	p.inventories.Store(node.Name, &cachedInventory{resourceVersion: node.ResourceVersion, inv: inv})
	return inv
}
