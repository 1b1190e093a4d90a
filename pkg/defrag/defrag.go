// Package defrag is gpusched's defragmenter: it runs the engine's migration
// planner (gpu.Planner) on the live cluster for GPU pods that fit nowhere,
// and in Enforce mode carries its plans out. A plan reserves the GPUs it
// chose in the nodes' gpu.AnnotationReservations, which the scheduler's
// ledger holds for the pods they are for (the pending pod, and each moved
// pod's replacement, matched by controller and shape), then evicts the
// pods it moves through the Eviction API, so that PodDisruptionBudgets
// are enforced by the API server as well as checked here. It stops a plan
// whose pods do not arrive in time, and releases what the plan holds.
//
// Every decision is visible: events on the pending pod and on each pod
// moved (or that would be, in DryRun), and Prometheus metrics. It imports
// client-go and the engine, not the scheduler framework.
package defrag

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Mode is what the defragmenter does with a plan.
type Mode string

const (
	// DryRun records what it would move and why (events and metrics) and
	// changes nothing. The default.
	DryRun Mode = "DryRun"
	// Enforce carries plans out.
	Enforce Mode = "Enforce"
)

// ParseMode reads a mode, naming the allowed ones when s is none.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{DryRun, Enforce} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	return "", fmt.Errorf("mode %q: want %s or %s", s, DryRun, Enforce)
}

// Options configure a Defragmenter.
type Options struct {
	Mode Mode
	// Name names the defragmenter (its Lease's name): its reservations'
	// IDs start with it, and it removes only its own (default
	// "gpusched-defragmenter").
	Name string
	// SchedulerNames are the schedulers whose pending pods are planned
	// for (default "gpusched").
	SchedulerNames []string
	// Policy places the pending pod and the moved pods in a plan: the
	// policy the scheduler places with (default the engine's default).
	Policy gpu.PolicyType
	// Selector opts pods in by label, beside AnnotationMovable.
	Selector labels.Selector
	// Interval is how often it looks for pods to make room for (default
	// 30 s); PlanTimeout how long a plan's pods have to arrive on the GPUs
	// it reserved (default 5 min).
	Interval    time.Duration
	PlanTimeout time.Duration
	// Rate limits on the pods moved (evicted, or that would be in DryRun)
	// in any hour: in all, from one node, from one namespace. Defaults 10,
	// 2 and 5.
	MovesPerHour, MovesPerNodePerHour, MovesPerNamespacePerHour int
	// PodGroups, when set, reads the PodGroups (scheduling.x-k8s.io) that
	// size the gangs planned for (ReadGangSpecs); without it, or
	// where the PodGroup of a gang is not found, the gang is not planned
	// for. Gangs of the Workload API are sized by their pods.
	PodGroups dynamic.Interface
	// GracePeriodSeconds, when set, is the grace period of the evictions;
	// each pod's own otherwise.
	GracePeriodSeconds *int64
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (o *Options) defaults() {
	o.Mode = cmp.Or(o.Mode, DryRun)
	o.Name = cmp.Or(o.Name, "gpusched-defragmenter")
	if len(o.SchedulerNames) == 0 {
		o.SchedulerNames = []string{"gpusched"}
	}
	o.Policy = cmp.Or(o.Policy, gpu.PolicyType(gpu.DefaultPolicy))
	o.Interval = cmp.Or(o.Interval, 30*time.Second)
	o.PlanTimeout = cmp.Or(o.PlanTimeout, 5*time.Minute)
	o.MovesPerHour = cmp.Or(o.MovesPerHour, 10)
	o.MovesPerNodePerHour = cmp.Or(o.MovesPerNodePerHour, 2)
	o.MovesPerNamespacePerHour = cmp.Or(o.MovesPerNamespacePerHour, 5)
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Defragmenter plans migrations for pending GPU pods and, in Enforce,
// carries them out, one plan at a time.
type Defragmenter struct {
	client   kubernetes.Interface
	opts     Options
	factory  informers.SharedInformerFactory
	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	pdbs     policylisters.PodDisruptionBudgetLister
	recorder record.EventRecorder
	metrics  *Metrics

	// active is the plan being carried out; nil when none.
	active *activePlan
	// moves are the pods moved in the last hour, for the rate limits.
	moves []move
	// told is the last message recorded on each pending pod, so that a
	// pod waiting for many rounds is told once per change.
	told map[types.UID]string
	seq  int
	// givenUp are the plans this instance gave up: their reservations, if
	// any were left, are orphans.
	givenUp map[string]bool
	// backoff holds, per pending pod of a plan given up or stopped, when
	// it may be planned for again: a plan that failed once (a filter the
	// planner does not model, a budget that refuses) would mostly fail
	// again, each time moving pods for nothing.
	backoff map[types.UID]time.Time
}

// move is one pod moved, for the rate limits.
type move struct {
	at              time.Time
	node, namespace string
}

// New builds a defragmenter over client. Run starts it.
func New(client kubernetes.Interface, recorder record.EventRecorder, metrics *Metrics, opts Options) (*Defragmenter, error) {
	opts.defaults()
	if _, err := gpu.LookupPolicy(string(opts.Policy)); err != nil {
		return nil, fmt.Errorf("defragmenter: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	d := &Defragmenter{client: client, opts: opts, factory: factory,
		nodes: factory.Core().V1().Nodes().Lister(), pods: factory.Core().V1().Pods().Lister(),
		pdbs: factory.Policy().V1().PodDisruptionBudgets().Lister(), recorder: recorder, metrics: metrics,
		told: map[types.UID]string{}, givenUp: map[string]bool{}, backoff: map[types.UID]time.Time{}}
	return d, nil
}

// Start starts watching the cluster and returns once the defragmenter has
// read it, and in Enforce the moves of the last hour (recentMoves): Round
// may be called from then on. The watches end with ctx.
func (d *Defragmenter) Start(ctx context.Context) error {
	d.factory.Start(ctx.Done())
	for typ, ok := range d.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("defragmenter: informer for %v did not sync", typ)
		}
	}
	if d.opts.Mode != Enforce {
		return nil
	}
	moves, err := d.recentMoves(ctx, d.opts.Now())
	if err != nil {
		// Without them the hourly limits would start from zero on every
		// restart: a defragmenter that crashes in a loop would move pods
		// without limit.
		return fmt.Errorf("defragmenter: %w", err)
	}
	d.moves = append(moves, d.moves...)
	return nil
}

// Run starts the defragmenter and runs a round every Interval until ctx
// ends.
func (d *Defragmenter) Run(ctx context.Context) error {
	if err := d.Start(ctx); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	logger.Info("Defragmenter started", "mode", d.opts.Mode, "policy", d.opts.Policy, "schedulers", d.opts.SchedulerNames)
	ticker := time.NewTicker(d.opts.Interval)
	defer ticker.Stop()
	for {
		if err := d.Round(ctx); err != nil {
			logger.Error(err, "Defragmentation round failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Round looks at the cluster once: it follows the active plan, and when
// there is none, plans for the pending pods that fit nowhere, in the
// scheduler's queue order, and acts on the first plan found.
func (d *Defragmenter) Round(ctx context.Context) error {
	nodes, err := d.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	pods, err := d.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	pdbs, err := d.pdbs.List(labels.Everything())
	if err != nil {
		return err
	}
	now := d.opts.Now()
	d.moves = slices.DeleteFunc(d.moves, func(m move) bool { return now.Sub(m.at) >= time.Hour })
	if d.active == nil && d.opts.Mode == Enforce {
		d.adopt(ctx, nodes, pods, now)
	}
	if d.active != nil {
		if err := d.follow(ctx, pods, now); err != nil {
			return err
		}
		if d.active != nil {
			return nil
		}
	}
	if d.opts.Mode == Enforce {
		if err := d.releaseOrphans(ctx, nodes, now); err != nil {
			return err
		}
	}
	snap := gpuview.Build(nodes, pods, gpuview.Options{SchedulerNames: d.opts.SchedulerNames})
	policy, err := snap.Policy(d.opts.Policy)
	if err != nil {
		return err
	}
	c := newCluster(snap, policy, &Rules{Selector: d.opts.Selector, PDBs: pdbs}, d.withinLimits)
	byKey := map[string]*v1.Pod{}
	for _, p := range pods {
		byKey[p.Namespace+"/"+p.Name] = p
	}
	d.forgetTold(snap, byKey)
	maps.DeleteFunc(d.backoff, func(_ types.UID, until time.Time) bool { return !now.Before(until) })
	tried := 0
	gangs := map[string]bool{} // the gangs looked at this round
	var specs map[string]gpuview.GangSpec
	for _, pending := range snap.Pending {
		pod := byKey[pending.Namespace+"/"+pending.Name]
		if pod == nil || !unschedulable(pod) || preempting(pod, pods) || d.backingOff(pod) {
			continue
		}
		if name, inGang := podgroup.GangOf(pod); inGang {
			if gangs[pod.Namespace+"/"+name] {
				continue
			}
			gangs[pod.Namespace+"/"+name] = true
			if specs == nil {
				specs = d.gangSpecs(ctx)
			}
			g, _ := snap.GangOf(pod, specs)
			a, why, ok := c.askOf(&g, specs)
			if !ok {
				for _, p := range g.Pending[:min(g.Queued, g.Need())] {
					if why != "" {
						d.tell(p, v1.EventTypeNormal, "NoMigrationPlan", why)
					}
				}
				continue
			}
			if !waitsForRoom(&a, pods) || slices.ContainsFunc(a.pods, d.backingOff) {
				continue
			}
			if tried++; d.planForGang(ctx, c, &g, &a) || tried == maxPlansPerRound {
				break
			}
			continue
		}
		if tried++; d.planFor(ctx, c, pod) || tried == maxPlansPerRound {
			break
		}
	}
	return nil
}

// gangSpecs reads what the PodGroups say of their gangs; empty when they
// cannot be read.
func (d *Defragmenter) gangSpecs(ctx context.Context) map[string]gpuview.GangSpec {
	if d.opts.PodGroups == nil {
		return map[string]gpuview.GangSpec{}
	}
	specs, err := ReadGangSpecs(ctx, d.opts.PodGroups)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading PodGroups")
	}
	if specs == nil {
		specs = map[string]gpuview.GangSpec{}
	}
	return specs
}

// backingOff reports whether pod was in a plan given up or stopped less
// than PlanTimeout ago (backoff).
func (d *Defragmenter) backingOff(pod *v1.Pod) bool {
	_, ok := d.backoff[pod.UID]
	return ok
}

// backOff keeps pods out of plans for PlanTimeout from now.
func (d *Defragmenter) backOff(pods []*v1.Pod) time.Time {
	until := d.opts.Now().Add(d.opts.PlanTimeout)
	for _, p := range pods {
		d.backoff[p.UID] = until
	}
	return until
}

// waitsForRoom reports whether the pods a gang asks to place (gangAsk)
// wait only for room: the scheduler found no node for each of them, and
// preemption is making room for none (preempting).
func waitsForRoom(a *gangAsk, pods []*v1.Pod) bool {
	for _, p := range a.pods {
		if !unschedulable(p) || preempting(p, pods) {
			return false
		}
	}
	return true
}

// preempting reports whether preemption is making room for pod: it is
// nominated to a node where pods are being deleted. (The scheduler also
// nominates a pod to the node it expects it on, as a gang's pod waiting at
// Permit, and a gang released keeps it: that makes no room.)
func preempting(pod *v1.Pod, pods []*v1.Pod) bool {
	node := pod.Status.NominatedNodeName
	return node != "" && slices.ContainsFunc(pods, func(p *v1.Pod) bool { return p.Spec.NodeName == node && p.DeletionTimestamp != nil })
}

// maxPlansPerRound bounds the pending pods a round plans for: a plan on a
// cluster of 5000 nodes takes about half a second (docs/benchmarks.md), and
// the pods first in the queue are the ones the scheduler tries first.
const maxPlansPerRound = 8

// unschedulable reports whether the scheduler found no node for the pod
// (its PodScheduled condition is False for Unschedulable).
func unschedulable(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable
		}
	}
	return false
}

// target is what a plan makes room for: one pending pod, or the pods of a
// gang that it needs placed, all at once.
type target struct {
	pods []*v1.Pod
	// gang is the gang's "namespace/name"; "" for one pod.
	gang string
}

// String names the target in events: "namespace/pod" or "gang
// namespace/name".
func (t *target) String() string {
	if t.gang != "" {
		return "gang " + t.gang
	}
	return t.pods[0].Namespace + "/" + t.pods[0].Name
}

// tellAll records an event on every pod of the target (tell).
func (d *Defragmenter) tellAll(t *target, eventType, reason, msg string) bool {
	changed := false
	for _, p := range t.pods {
		changed = d.tell(p, eventType, reason, msg) || changed
	}
	return changed
}

// planFor plans for one pending pod and acts on the plan; it reports
// whether a plan was found (and, in Enforce, started).
func (d *Defragmenter) planFor(ctx context.Context, c *cluster, pod *v1.Pod) bool {
	t := &target{pods: []*v1.Pod{pod}}
	left := d.opts.MovesPerHour - len(d.moves)
	if left < 1 {
		d.tellAll(t, v1.EventTypeNormal, "NoMigrationPlan", d.spentText())
		return false
	}
	plan, ok, why := c.plan(pod, min(left, d.opts.MovesPerNodePerHour))
	return d.act(ctx, c.snap, t, []gpu.Plan{plan}, ok, why)
}

// planForGang plans for the pods gang g asks to place (a), all at once,
// and acts on the plans; it reports whether they were found (and, in
// Enforce, started).
func (d *Defragmenter) planForGang(ctx context.Context, c *cluster, g *gpuview.GangPods, a *gangAsk) bool {
	t := &target{pods: a.pods, gang: g.Key}
	left := d.opts.MovesPerHour - len(d.moves)
	if left < 1 {
		d.tellAll(t, v1.EventTypeNormal, "NoMigrationPlan", d.spentText())
		return false
	}
	plans, ok, why := c.planGang(g, a, left)
	return d.act(ctx, c.snap, t, plans, ok, why)
}

func (d *Defragmenter) spentText() string {
	return fmt.Sprintf("no pods may be moved to make room: the %d moves allowed per hour are spent", d.opts.MovesPerHour)
}

// act carries out plans (DryRun: says what they would do), or tells the
// target's pods why there are none.
func (d *Defragmenter) act(ctx context.Context, snap *gpuview.Snapshot, t *target, plans []gpu.Plan, ok bool, why *noPlan) bool {
	if ok {
		if over := d.overLimits(snap, plans); over != "" {
			ok, why = false, &noPlan{text: "the migration plan found would " + over}
		}
	}
	switch {
	case !ok && why == nil:
		return false // no GPU to make room for
	case !ok:
		eventType := v1.EventTypeNormal
		if why.blocked {
			eventType = v1.EventTypeWarning
		}
		d.tellAll(t, eventType, "NoMigrationPlan", why.text)
		d.metrics.plans.WithLabelValues(string(d.opts.Mode), "no-plan").Inc()
		return false
	case movesOf(plans) == 0:
		return false // it fits as the cluster is: the scheduler places it
	case d.opts.Mode == DryRun:
		d.dryRun(snap, t, plans)
		return true
	}
	return d.start(ctx, snap, t, plans)
}

// overLimits says how plans, with the moves of the last hour, would exceed
// the hourly limits of a node or a namespace; "" when they would not.
// (withinLimits keeps pods of a node or namespace already at its limit out
// of plans; plans of several moves can still pass it.)
func (d *Defragmenter) overLimits(snap *gpuview.Snapshot, plans []gpu.Plan) string {
	byNamespace, byNode := map[string]int{}, map[string]int{}
	for _, m := range d.moves {
		byNamespace[m.namespace]++
		byNode[m.node]++
	}
	for _, plan := range plans {
		if len(plan.Moves) == 0 {
			continue
		}
		if byNode[plan.Node] += len(plan.Moves); byNode[plan.Node] > d.opts.MovesPerNodePerHour {
			return fmt.Sprintf("move %d pods off node %s within the hour, beyond --moves-per-node-per-hour %d", byNode[plan.Node], plan.Node, d.opts.MovesPerNodePerHour)
		}
		for _, mv := range plan.Moves {
			if p := snap.Pod(mv.Pod); p != nil {
				byNamespace[p.Namespace]++
				if byNamespace[p.Namespace] > d.opts.MovesPerNamespacePerHour {
					return fmt.Sprintf("move %d pods of namespace %s within the hour, beyond --moves-per-namespace-per-hour %d", byNamespace[p.Namespace], p.Namespace, d.opts.MovesPerNamespacePerHour)
				}
			}
		}
	}
	return ""
}

// withinLimits reports whether moving pod keeps within the hourly limits
// of its node and namespace.
func (d *Defragmenter) withinLimits(pod *v1.Pod) bool {
	var onNode, inNamespace int
	for _, m := range d.moves {
		if m.node == pod.Spec.NodeName {
			onNode++
		}
		if m.namespace == pod.Namespace {
			inNamespace++
		}
	}
	return onNode < d.opts.MovesPerNodePerHour && inNamespace < d.opts.MovesPerNamespacePerHour
}

// dryRun records what plans would do.
func (d *Defragmenter) dryRun(snap *gpuview.Snapshot, t *target, plans []gpu.Plan) {
	now := d.opts.Now()
	if changed := d.tellAll(t, v1.EventTypeNormal, "WouldMakeRoom", "DryRun: "+describe(snap, t, plans)); !changed {
		return
	}
	d.metrics.plans.WithLabelValues(string(DryRun), "planned").Inc()
	for _, plan := range plans {
		for _, mv := range plan.Moves {
			if p := snap.Pod(mv.Pod); p != nil {
				d.recorder.Eventf(p, v1.EventTypeNormal, "WouldMove", "DryRun: would be moved from node %s to node %s GPUs %s to make room for %s",
					mv.From, mv.To.Node, devices(&mv.To), t)
				d.moves = append(d.moves, move{at: now, node: mv.From, namespace: p.Namespace})
				d.metrics.moves.WithLabelValues(string(DryRun)).Inc()
			}
		}
	}
}

// forgetTold forgets what it told pods that are no longer pending.
func (d *Defragmenter) forgetTold(snap *gpuview.Snapshot, byKey map[string]*v1.Pod) {
	pending := map[types.UID]bool{}
	for _, p := range snap.Pending {
		if pod := byKey[p.Namespace+"/"+p.Name]; pod != nil {
			pending[pod.UID] = true
		}
	}
	maps.DeleteFunc(d.told, func(uid types.UID, _ string) bool { return !pending[uid] })
}

// tell records an event on pod unless the last one it was told reads the
// same; it reports whether it recorded one.
func (d *Defragmenter) tell(pod *v1.Pod, eventType, reason, msg string) bool {
	if d.told[pod.UID] == reason+msg {
		return false
	}
	d.told[pod.UID] = reason + msg
	d.recorder.Event(pod, eventType, reason, msg)
	return true
}

// describe is plans, made for t's pods, in words.
func describe(snap *gpuview.Snapshot, t *target, plans []gpu.Plan) string {
	var moves, places []string
	for i, plan := range plans {
		for _, mv := range plan.Moves {
			name := mv.Pod
			if p := snap.Pod(mv.Pod); p != nil {
				name = p.Namespace + "/" + p.Name
			}
			moves = append(moves, fmt.Sprintf("%s from %s to %s GPUs %s", name, mv.From, mv.To.Node, devices(&mv.To)))
		}
		places = append(places, fmt.Sprintf("%s/%s on node %s GPUs %s", t.pods[i].Namespace, t.pods[i].Name, plan.Node, devices(&plan.Assignment)))
	}
	if t.gang == "" {
		return fmt.Sprintf("moving %d pod(s) makes room for %s: %s", len(moves), places[0], strings.Join(moves, "; "))
	}
	return fmt.Sprintf("moving %d pod(s) makes room for %s, the %d pods it needs at once (%s): %s",
		len(moves), t, len(t.pods), strings.Join(places, ", "), strings.Join(moves, "; "))
}

// devices is an assignment's GPUs in words: "0,1" or "3 (250 milli-GPU)".
func devices(a *gpu.Assignment) string {
	ids := make([]string, len(a.Devices))
	for i, x := range a.Devices {
		ids[i] = fmt.Sprint(x)
	}
	out := strings.Join(ids, ",")
	if a.Milli < gpu.MilliPerGPU {
		out += fmt.Sprintf(" (%d milli-GPU)", a.Milli)
	}
	return out
}

func priorityOf(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// evictionOf is the Eviction of pod, bound to its UID so that a pod
// recreated under the same name is not evicted in its place.
func evictionOf(pod *v1.Pod, gracePeriodSeconds *int64) *policyv1.Eviction {
	e := &policyv1.Eviction{}
	e.Name, e.Namespace = pod.Name, pod.Namespace
	e.DeleteOptions = deleteUID(pod.UID)
	e.DeleteOptions.GracePeriodSeconds = gracePeriodSeconds
	return e
}
