// Package gpuplacement is the GPUPlacement kube-scheduler plugin: a thin
// adapter from the scheduling framework's extension points to the placement
// engine in pkg/gpu. Every decision is the engine's; this package maps the
// engine's results to framework statuses and keeps the ledger in step with the
// scheduling cycle.
package gpuplacement

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement/internal/dra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuhealth"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
	"github.com/gpusched/gpusched/pkg/plugins/internal/nodehost"
	"github.com/gpusched/gpusched/pkg/plugins/internal/normalize"
	"github.com/gpusched/gpusched/pkg/policyservice"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUPlacement"

// stateKey is where PreFilter leaves the pod's demand in the CycleState.
const stateKey fwk.StateKey = "PreFilter" + Name

// ReasonAnnotationHolders is why a claim pod, or whole GPUs deferred to
// DRA, wait for a node whose GPUs pods hold by gpusched's annotation.
const ReasonAnnotationHolders = dra.ReasonAnnotationHolders

// assignmentKey is where Reserve leaves the pod's assignment for PreBind.
const assignmentKey fwk.StateKey = "Reserve" + Name

// GPUPlacement places pods on GPUs. See the package comment.
type GPUPlacement struct {
	handle fwk.Handle
	policy *gpu.Policy
	// fleet is the cluster's GPUs by model, as policy reads them.
	fleet  gpu.Fleet
	ledger *gpu.Ledger
	// dra is the plugin's half for GPUs that a DRA driver publishes; nil
	// without DRA (see dra.NewPlacer).
	dra *dra.Placer
	// external is the policy service of the External scoring strategy; nil
	// for the engine's policies (policy is then the fallback policy).
	external *policyservice.Scorer
	// settleAfter is how long after a failed Binding's write its GPUs stay
	// held before a read may free them (args' bindSettleAfter).
	settleAfter time.Duration

	// bindOrder guards binds: whether this plugin is the profile's first
	// bind plugin, read once the framework is complete (see bindsFirst).
	bindOrder sync.Once
	binds     bool
	// lastMaxima is the last result of maxima.
	lastMaxima atomic.Pointer[nodeMaxima]
	// featureMemo keeps the nodes' features from cycle to cycle (Features).
	featureMemo featureMemo
	// reportedNodes maps a node name to the resourceVersion whose invalid GPU
	// inventory was last reported in an event (see reportInvalidInventory).
	reportedNodes sync.Map
	// reservations is where the nodes' GPU reservations are (the
	// defragmenter's), for PreFilter.
	reservations gpu.ReservationIndex
	// background lives as long as the plugin; stop ends it, and with it
	// the plugin's background work (the reason keeper, settleBind).
	background context.Context
	stop       context.CancelFunc
}

var (
	_ fwk.PreFilterPlugin   = &GPUPlacement{}
	_ fwk.FilterPlugin      = &GPUPlacement{}
	_ fwk.PreScorePlugin    = &GPUPlacement{}
	_ fwk.ScorePlugin       = &GPUPlacement{}
	_ fwk.ScoreExtensions   = &GPUPlacement{}
	_ fwk.ReservePlugin     = &GPUPlacement{}
	_ fwk.PreBindPlugin     = &GPUPlacement{}
	_ fwk.BindPlugin        = &GPUPlacement{}
	_ fwk.EnqueueExtensions = &GPUPlacement{}
	_ fwk.SignPlugin        = &GPUPlacement{}
)

// New builds the plugin from its args: the internal GPUPlacementArgs the
// kube-scheduler's configuration loader produces, or nil for the defaults.
// The args are validated again here, so a plugin built any other way (tests,
// the simulator) is held to the same rules.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return newPlugin(ctx, obj, h, nil)
}

// NewWithShapes is the factory of a GPUPlacement whose policy, where it
// measures fragmentation and its args configure no typical pods, measures
// it against shapes, fixed (config.GPUPlacementArgs.NewPolicyWithShapes):
// the simulator registers it with the workload's typical pods.
func NewWithShapes(shapes gpu.Shapes) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, h, shapes)
	}
}

func newPlugin(ctx context.Context, obj runtime.Object, h fwk.Handle, shapes gpu.Shapes) (fwk.Plugin, error) {
	args, err := load.GPUPlacementArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	policy, err := args.NewPolicyWithShapes(shapes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	external, err := newExternal(args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	ledger, reader := gpu.NewLedger(), dra.NewReader(args.DRA, h, Name)
	fleet := dra.FleetOf(ledger, reader)
	p := &GPUPlacement{handle: h, ledger: ledger, policy: policy.WithFleet(fleet), fleet: fleet, external: external,
		settleAfter: cmp.Or(args.BindSettleAfter, gpu.DefaultBindSettleAfter)}
	p.dra = dra.NewPlacer(reader, p.policy, h, p.clusterMaxima)
	conflictLog := klog.FromContext(ctx)
	p.ledger.ReportConflicts(func(node string, conflicts []string) {
		conflictLog.Info(gpu.ConflictsMessage(conflicts), "node", node, "conflicts", conflicts)
	})
	if err := p.forgetDeletedPods(); err != nil {
		return nil, err
	}
	if err := p.followNodes(); err != nil {
		return nil, err
	}
	p.background, p.stop = context.WithCancel(ctx)
	p.keepReasons(p.background)
	return p, nil
}

// forgetDeletedPods ends the ledger's assumption for a pod that leaves the
// scheduler's pod informer (deleted, or terminated): a pod bound and deleted
// before any read of its node saw it bound would otherwise stay assumed, and
// Reserve (gpu.Ledger.NodeInFlight) would count its GPUs. A handle without an
// informer factory (the plugin's unit tests) has no deletions to follow.
func (p *GPUPlacement) forgetDeletedPods() error {
	factory := p.handle.SharedInformerFactory()
	if factory == nil {
		return nil
	}
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				p.ledger.Forget(pod.UID)
				p.ledger.SettleAll(pod.UID)
				p.policy.Forget(pod.UID)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: watching pod deletions: %w", Name, err)
	}
	return nil
}

// Name implements fwk.Plugin.
func (p *GPUPlacement) Name() string { return Name }

// podState is the pod's demand, computed once per cycle by PreFilter.
type podState struct {
	demand gpu.Demand
	// mayTakeReservation is set when some node holds a reservation the pod
	// may take (gpu.Reservation.Reserves): PreFilter then limits the cycle
	// to those nodes, and Filter, Score and Reserve read their views with
	// the reserved GPUs given back to the pod (reservedView).
	mayTakeReservation bool
}

// Clone implements fwk.StateData; podState is never modified after PreFilter.
func (s *podState) Clone() fwk.StateData { return s }

// PreFilter hands the plugin's ledger to the cycle's other plugins
// (gpuledger), reads the pod's GPU demand, and for a pod that asks for GPUs
// the cycle's view of DRA (see dra.Reader). A pod that asks for no GPU skips the
// plugin. A malformed demand is UnschedulableAndUnresolvable with the engine's
// message, which names the annotation, the value and what is allowed; it
// reaches the user in the FailedScheduling event, and the pod is retried when
// it is updated.
func (p *GPUPlacement) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	gpuledger.Write(state, p)
	demand, err := p.policy.Demand(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if demand.IsZero() {
		// No GPU to filter for; the pod is still scored when the policy
		// weighs CPU, or when its own ResourceClaims may take DRA GPUs.
		// A host-aware policy scores every pod with the node's GPUs, which
		// on a DRA node are the DRA inventory and allocations.
		scored, filtered := p.policy.Scores(&demand), false
		if p.dra != nil && (scored || dra.HasClaims(pod)) {
			found, status := p.dra.Read(ctx, state, false)
			if status != nil {
				return nil, status
			}
			scored = scored || found
			if found && dra.HasClaims(pod) {
				filtered = p.dra.PreFilterClaims(ctx, state, pod, nodes, &demand)
			}
		}
		p.observe(ctx, state, pod, demand)
		if scored || filtered {
			state.Write(stateKey, &podState{demand: demand})
		}
		if filtered {
			return nil, nil
		}
		return nil, fwk.NewStatus(fwk.Skip)
	}
	p.policy.Observe(pod.UID, demand)
	s := &podState{demand: demand}
	state.Write(stateKey, s)
	if p.dra != nil {
		found, status := p.dra.Read(ctx, state, true)
		if status != nil {
			return nil, status
		}
		if found {
			p.dra.ChooseForDeferred(ctx, state, nodes, &demand)
		}
	}
	if reserved := p.reservations.NodesFor(pod, &demand, p.ledger.HoldsReservation); reserved != nil {
		s.mayTakeReservation = true
		return &fwk.PreFilterResult{NodeNames: reserved}, nil
	}
	return nil, nil
}

// TypicalPods is the pod shapes the policy measures fragmentation against
// now: its seed and what it learned from the pods it saw; nil for a policy
// that measures none.
func (p *GPUPlacement) TypicalPods() []gpu.TypicalPod {
	if s := p.policy.Shapes(); s != nil {
		return s.Typical()
	}
	return nil
}

// observe adds the shape of a pod that asks gpusched for no GPU to the
// typical pods the policy learns (gpu.Policy.Observe): what its
// ResourceClaims ask of the DRA driver's GPUs, with its CPU and memory as
// the policy read them, when the cycle read DRA and the claims ask for
// GPUs, so that on a DRA cluster the learned shapes are the claims', not
// those of CPU-only pods; else its demand as it is. A pod whose claims are
// not made yet is not observed: the window keeps a pod's first shape, and
// its claims' is the one to keep.
func (p *GPUPlacement) observe(ctx context.Context, state fwk.CycleState, pod *v1.Pod, demand gpu.Demand) {
	if cycle := dra.CycleOf(state); cycle != nil && dra.HasClaims(pod) {
		claims, pending := cycle.ClaimDemand(ctx, pod)
		switch {
		case pending:
			return
		case !claims.IsZero():
			claims.MilliCPU, claims.HostMemoryMiB = demand.MilliCPU, demand.HostMemoryMiB // as the policy read them
			demand = claims
		}
	}
	p.policy.Observe(pod.UID, demand)
}

// PreFilterExtensions implements fwk.PreFilterPlugin. The plugin has none:
// preemption's what-if evaluation re-reads the node's pods through its
// NodeInfo, whose generation changes with them.
func (p *GPUPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func demandOf(state fwk.CycleState) (*gpu.Demand, *fwk.Status) {
	s, status := podStateOf(state)
	if status != nil {
		return nil, status
	}
	return &s.demand, nil
}

func podStateOf(state fwk.CycleState) (*podState, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("%s: reading pod state: %w", Name, err))
	}
	return data.(*podState), nil
}

// nodeGPUs is the ledger's view of a node in the cycle's snapshot.
func (p *GPUPlacement) nodeGPUs(nodeInfo fwk.NodeInfo) *gpu.NodeGPUs {
	return p.ledger.Node(nodeInfo.Node(), nodeInfo.GetGeneration(), podsOf(nodeInfo))
}

func podsOf(nodeInfo fwk.NodeInfo) iter.Seq[*v1.Pod] {
	return func(yield func(*v1.Pod) bool) {
		for _, pi := range nodeInfo.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// Filter checks that the node has GPUs for the demand. It returns one reason
// per cause, UnschedulableAndUnresolvable when freeing GPUs on the node cannot
// help (model, memory size, GPU count), else Unschedulable (preemption may help).
// A node whose GPUs DRA allocates is decided by the plugin's DRA half.
func (p *GPUPlacement) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, status := podStateOf(state)
	if status != nil {
		return status
	}
	demand := &s.demand
	if demand.IsZero() { // a pod with claims (dra.Placer.PreFilterClaims)
		if p.dra == nil {
			return nil
		}
		return p.dra.FilterClaims(ctx, state, nodeInfo)
	}
	if cycle, d := dra.NodeOf(state, nodeInfo.Node().Name); d != nil {
		return p.dra.Filter(cycle, d, demand, nodeInfo)
	}
	if status := dra.FilterHeld(dra.CycleOf(state), nodeInfo.Node().Name); status != nil {
		return status
	}
	n, _ := p.reservedView(p.nodeGPUs(nodeInfo), pod, s)
	fit := gpu.Check(n, &gpu.Request{Demand: demand, Exclude: gpuhealth.Read(state)})
	if fit.Reasons.Has(gpu.ReasonInventoryInvalid) {
		p.reportInvalidInventory(nodeInfo.Node(), n.Err)
	}
	return statusOf(fit)
}

// reportInvalidInventory records a Warning event on a node whose GPU labels
// or annotation are malformed, naming the field, the value and what is
// allowed: the pods' events only say "node GPU inventory invalid". It reports
// each version of the node once.
func (p *GPUPlacement) reportInvalidInventory(node *v1.Node, err error) {
	if last, ok := p.reportedNodes.Load(node.Name); ok && last == node.ResourceVersion {
		return
	}
	p.reportedNodes.Store(node.Name, node.ResourceVersion)
	if recorder := p.handle.EventRecorder(); recorder != nil {
		recorder.Eventf(node, nil, v1.EventTypeWarning, "InvalidGPUInventory", "Scheduling",
			"gpusched cannot place pods on this node's GPUs: %v", err)
	}
}

// statusOf maps the engine's fit to a framework status: Unschedulable
// when freeing GPUs on the node may help (preemption), else
// UnschedulableAndUnresolvable; GPUs left out as excluded (unhealthy in the
// telemetry's view) are Unschedulable, since that view may change.
func statusOf(fit gpu.Fit) *fwk.Status {
	switch {
	case fit.Reasons != 0 && fit.Reasons.Unresolvable():
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fit.Reasons.Strings()...)
	case fit.Reasons != 0:
		return fwk.NewStatus(fwk.Unschedulable, fit.Reasons.Strings()...)
	case fit.Excluded != "":
		return fwk.NewStatus(fwk.Unschedulable, fit.Excluded)
	}
	return nil
}

// PreScore skips scoring for a pod without GPU demand, unless the policy
// weighs CPU too (gpu.PolicyInfo.HostAware) or the pod's ResourceClaims may
// take DRA GPUs (the DRA half prepares their prediction); for a
// host-aware policy it records the largest node capacities in the
// snapshot, which the policy normalizes by. With the External strategy it
// then asks the policy service to score the nodes (preScoreExternal).
// Last it records what the cycle's scores depend on (NodeLocalScores).
func (p *GPUPlacement) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, feasible []fwk.NodeInfo) *fwk.Status {
	data, err := state.Read(stateKey)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	if cycle := dra.CycleOf(state); cycle != nil {
		p.dra.PreScore(ctx, state, pod, cycle, &data.(*podState).demand)
	}
	if p.policy.Info().HostAware {
		nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return fwk.AsStatus(fmt.Errorf("%s: listing nodes: %w", Name, err))
		}
		state.Write(hostKey, &hostState{maxima: p.clusterMaxima(nodes, dra.CycleOf(state))})
	}
	if p.external != nil {
		p.preScoreExternal(ctx, state, pod, feasible)
	}
	p.writeScoresKey(state, data.(*podState))
	return nil
}

// clusterMaxima is the cluster's largest capacities as host-aware policies
// normalize by (gpu.Maxima): the nodes', with the GPUs DRA nodes publish.
func (p *GPUPlacement) clusterMaxima(nodes []fwk.NodeInfo, cycle *dra.Cycle) gpu.Maxima {
	m := p.maxima(nodes)
	if cycle != nil {
		m.Include(0, cycle.MaxGPUs())
	}
	return m
}

// maxima is the nodes' largest allocatable CPU and GPU inventory. They
// change only with the Node objects, so the last result is kept with the
// objects it was computed from and reused while the snapshot lists the same
// ones.
func (p *GPUPlacement) maxima(nodes []fwk.NodeInfo) gpu.Maxima {
	if last := p.lastMaxima.Load(); last != nil && len(last.nodes) == len(nodes) {
		same := true
		for i, ni := range nodes {
			if ni.Node() != last.nodes[i] {
				same = false
				break
			}
		}
		if same {
			return last.maxima
		}
	}
	m := &nodeMaxima{nodes: make([]*v1.Node, len(nodes))}
	for i, ni := range nodes {
		m.nodes[i] = ni.Node()
		m.maxima.Include(ni.GetAllocatable().GetMilliCPU(), p.nodeGPUs(ni).Len())
	}
	p.lastMaxima.Store(m)
	return m.maxima
}

// nodeMaxima is maxima's result and the Node objects it was computed from.
type nodeMaxima struct {
	nodes  []*v1.Node
	maxima gpu.Maxima
}

// hostKey is where PreScore leaves the cluster's largest capacities.
const hostKey fwk.StateKey = "PreScore" + Name

// hostState holds the normalizing capacities of a host-aware policy.
type hostState struct{ maxima gpu.Maxima }

// Clone implements fwk.StateData; hostState is never modified after PreScore.
func (s *hostState) Clone() fwk.StateData { return s }

// Score is the policy's engine score for placing the pod on the node, in
// 0..gpu.MaxScore; NormalizeScore rescales it. On a node whose GPUs DRA
// allocates, the plugin's DRA half scores the devices the policy chose for
// the pod's claims, or those DRA is predicted to take (dra.Placer.Score).
func (p *GPUPlacement) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := podStateOf(state)
	if status != nil {
		return 0, status
	}
	demand := &s.demand
	if ext := externalOf(state); ext != nil {
		return ext.scores[nodeInfo.Node().Name], nil
	}
	if cycle, d := dra.NodeOf(state, nodeInfo.Node().Name); d != nil {
		return p.dra.Score(ctx, state, pod, nodeInfo, cycle, d, demand, hostOf(state, nodeInfo)), nil
	}
	n, _ := p.reservedView(p.nodeGPUs(nodeInfo), pod, s)
	req := requestOf(state, nodeInfo, demand)
	// A demand that no longer fits scores 0: the node changed since Filter,
	// and it will not be chosen.
	_, _, score := p.policy.PlaceAndScore(n, &req)
	return score, nil
}

// requestOf is the engine request for the pod on the node: its demand, the
// node's CPU and memory, and the GPUs the cycle's health view excludes.
func requestOf(state fwk.CycleState, nodeInfo fwk.NodeInfo, demand *gpu.Demand) gpu.Request {
	return gpu.Request{Demand: demand, Host: hostOf(state, nodeInfo), Exclude: gpuhealth.Read(state)}
}

// hostOf is the node's CPU with the cluster's largest capacities, as
// PreScore recorded them (none when PreScore did not run: a single feasible
// node is not scored).
func hostOf(state fwk.CycleState, nodeInfo fwk.NodeInfo) gpu.Host {
	var maxima gpu.Maxima
	if data, err := state.Read(hostKey); err == nil {
		maxima = data.(*hostState).maxima
	}
	return nodehost.Of(maxima, nodeInfo)
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *GPUPlacement) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore rescales engine scores to 0..100 over the feasible nodes,
// as the policy's scores mean to be compared (gpu.Policy.Rescale): the
// extender rescales the same way to its 0..10. A policy service's scores
// are already 0..100 (preScoreExternal).
func (p *GPUPlacement) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if externalOf(state) != nil {
		return nil
	}
	normalize.Rescale(scores, p.policy.Rescale)
	return nil
}

// SignPod lets opportunistic batching treat pods with equal demand alike:
// the plugin's decisions depend on the pod only through its demand as the
// policy reads it (gpu.Policy.Demand), identified by gpu.DemandKey. A pod
// whose demand is malformed is not signed.
func (p *GPUPlacement) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	demand, err := p.policy.Demand(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	return []fwk.SignFragment{{
		Key:   "gpusched.io/GPUPlacement.Demand()",
		Value: demand.Key(),
	}}, nil
}

func logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("plugin", Name)
}
