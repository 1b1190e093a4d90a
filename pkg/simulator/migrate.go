package simulator

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// MigrationBudget is how many pods a run may move to make room for pods
// that fit nowhere (gpu.Planner): a fraction of the pods placed so far, or
// a number per hour of trace time (replay arrival). The zero budget moves
// nothing.
type MigrationBudget struct {
	// Fraction of the placed pods, counted as pods are placed: after 1000
	// placements a budget of 0.02 has allowed 20 moves in all.
	Fraction float64
	// PerHour is moves per hour of the trace's time, with replay arrival.
	PerHour float64
}

// IsZero reports whether the budget moves nothing.
func (b MigrationBudget) IsZero() bool { return b.Fraction == 0 && b.PerHour == 0 }

// String is the budget as ParseMigrationBudget reads it.
func (b MigrationBudget) String() string {
	if b.PerHour > 0 {
		return strconv.FormatFloat(b.PerHour, 'g', 6, 64) + "/h"
	}
	return strconv.FormatFloat(100*b.Fraction, 'g', 6, 64) + "%"
}

// ParseMigrationBudget reads "2%" or "0.02" (a fraction of placed pods,
// at most 100%) or "30/h" (moves per hour of trace time).
func ParseMigrationBudget(s string) (MigrationBudget, error) {
	in := s
	bad := func(why string) error {
		return fmt.Errorf("migration budget %q: %s; want a fraction of placed pods (\"2%%\" or \"0.02\", at most 100%%) or moves per hour of trace time (\"30/h\")", in, why)
	}
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "/h"); ok {
		x, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err != nil || !(x > 0) || math.IsInf(x, 0) {
			return MigrationBudget{}, bad("not a positive number per hour")
		}
		return MigrationBudget{PerHour: x}, nil
	}
	scale := 1.0
	if n, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = strings.TrimSpace(n), 0.01
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || !(x > 0) || x*scale > 1 {
		return MigrationBudget{}, bad("not a fraction above 0 and at most 1")
	}
	return MigrationBudget{Fraction: x * scale}, nil
}

// checkMigrations refuses migration budgets the run cannot honour.
func checkMigrations(opts Options) error {
	for _, p := range opts.Profiles {
		switch {
		case p.Migrations.IsZero():
		case opts.DRA:
			return fmt.Errorf("profile %s: migrations (budget %s) are not simulated on the DRA path", p.Name, p.Migrations)
		case p.Migrations.PerHour > 0 && opts.Arrival != trace.ArrivalReplay:
			return fmt.Errorf("profile %s: a migration budget per hour (%s) needs --arrival %s; with --arrival %s give a fraction of placed pods", p.Name, p.Migrations, trace.ArrivalReplay, opts.Arrival)
		}
	}
	return nil
}

// migrator is a run's migrations: its planner and budget, and what it did.
type migrator struct {
	budget  MigrationBudget
	planner gpu.Planner
	index   map[types.UID]int // pod UID → index into the episode's pods
	// noPlan holds, per demand and priority no plan was found for, the
	// most moves that were allowed, since the cluster last changed
	// otherwise than by placing a pod (a departure or a plan carried out):
	// placing pods only takes room, so no plan of as many moves would be
	// found again.
	noPlan map[planKey]int
	// current is the pod that runs for pods[i] once it moved (replacement);
	// generation numbers the replacements.
	current    map[int]*v1.Pod
	generation int
	// placement is the index of pods[i]'s entry in Run.Placements.
	placement map[int]int
	// demands are the bound pods' demands (gpu.PlanDemand) by UID, read once:
	// a pod's spec never changes, and a moved pod's replacement has a UID
	// of its own.
	demands map[string]gpu.Demand
	// maxima are the nodes' largest capacities (gpu.Maxima).
	maxima   gpu.Maxima
	firstSec int64
	stats    report.MigrationStats
	// fleet is the planner's fleet, whose room planNodes sets; nil for a
	// migrator built on a policy of its own (tests).
	fleet *plannerFleet
}

// newRunMigrator is the migrator of a run of profile on nodes: its planner
// places pods with the profile's own policy, measuring fragmentation
// against the workload's typical pods as the run's GPUPlacement does
// (GPUPlacementArgs.NewPolicyWithShapes, runRegistry), and knowing the
// cluster's GPUs by model as the plugin does.
func newRunMigrator(profile Profile, nodes []*v1.Node, typical []gpu.TypicalPod) (*migrator, error) {
	args := findGPUPlacementArgs(profile.Profile)
	if args == nil {
		return nil, fmt.Errorf("profile %s: migrations need GPUPlacement, whose policy plans them", profile.Name)
	}
	policy, err := args.NewPolicyWithShapes(gpu.StaticShapes(typical))
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", profile.Name, err)
	}
	invs := make([]*gpu.Inventory, 0, len(nodes))
	for _, n := range nodes {
		if inv, err := gpu.InventoryFromNode(n); err == nil {
			invs = append(invs, inv)
		}
	}
	fleet := &plannerFleet{census: gpu.CountModels(invs)}
	m := newMigrator(profile.Migrations, policy.WithFleet(fleet), nodes)
	m.fleet = fleet
	return m, nil
}

// plannerFleet is the planner's fleet (gpu.FleetRoom): the simulated
// cluster's GPUs by model, which never change, and their free room when
// the planner was last asked (planNodes), as the run's GPUPlacement knows
// both from its ledger.
type plannerFleet struct {
	census gpu.ModelGPUs
	room   *gpu.FreeRoom
}

func (f *plannerFleet) GPUsByModel() gpu.ModelGPUs { return f.census }

func (f *plannerFleet) RoomByModel() *gpu.FreeRoom { return f.room }

func newMigrator(budget MigrationBudget, policy *gpu.Policy, nodes []*v1.Node) *migrator {
	m := &migrator{budget: budget, planner: gpu.Planner{Policy: policy}, noPlan: map[planKey]int{}, current: map[int]*v1.Pod{},
		placement: map[int]int{}, demands: map[string]gpu.Demand{}, firstSec: -1}
	m.stats.Budget = budget.String()
	for _, n := range nodes {
		m.maxima.IncludeNode(n)
	}
	return m
}

// allowed is how many more pods the budget lets the run move now.
func (m *migrator) allowed(e *episode) int {
	var total float64
	if m.budget.PerHour > 0 {
		if m.firstSec < 0 {
			return 0
		}
		total = m.budget.PerHour * float64(e.clock.seconds.Load()-m.firstSec) / 3600
	} else {
		total = m.budget.Fraction * float64(e.out.Placed)
	}
	return int(total) - m.stats.Moves
}

// planKey is what the planner's answer depends on besides the cluster and
// the moves allowed.
type planKey struct {
	demand   gpu.DemandKey
	priority int32
}

// changed forgets the demands no plan was found for.
func (m *migrator) changed() { clear(m.noPlan) }

// makeRoom plans and carries out migrations after which pod, which fits
// nowhere, fits a node, and returns the decision to place it there; nil
// when no plan within the budget exists. The moved pods are taken off their
// node and placed on their destinations through the framework, as the
// replacements a controller creates would be.
func (m *migrator) makeRoom(e *episode, pod *v1.Pod) *decision {
	d, err := gpu.PlanDemand(m.planner.Policy, pod)
	if err != nil || d.IsZero() {
		return nil
	}
	maxMoves := min(m.allowed(e), gpu.MaxMoves(&d))
	key := planKey{d.Key(), podPriority(pod)}
	if tried, ok := m.noPlan[key]; maxMoves < 1 || ok && maxMoves <= tried {
		return nil
	}
	m.planner.MaxMoves = maxMoves
	plan, ok := m.planner.MakeRoom(m.planNodes(e), &d, key.priority)
	if !ok {
		m.noPlan[key] = maxMoves
		return nil
	}
	m.changed()
	m.stats.Plans++
	for _, mv := range plan.Moves {
		m.stats.Moves++
		e.unbind(m.index[types.UID(mv.Pod)], mv.Pod)
	}
	for _, mv := range plan.Moves {
		i := m.index[types.UID(mv.Pod)]
		moved := m.replacement(e, i)
		target := mv.To.Node
		dv := e.sched.decideOn(e.ctx, moved, target)
		if dv == nil {
			m.stats.Returned++
			target = plan.Node
			dv = e.sched.decideOn(e.ctx, moved, target)
		}
		if dv == nil || e.sched.commit(e.ctx, dv, target).node == "" {
			m.stats.Lost++
			e.lose(i)
			continue
		}
		e.bind(i, moved)
	}
	dp := e.sched.decideOn(e.ctx, pod, plan.Node)
	if dp != nil {
		m.stats.PlacedByPlans++
		m.stats.GPUMilliPlaced += int64(d.Count) * d.Milli
	}
	return dp
}

// replacement is the pod that replaces pods[i] when it moves: the same
// spec under a new UID, as a controller creates it, known by that UID from
// then on.
func (m *migrator) replacement(e *episode, i int) *v1.Pod {
	pod := e.pods[i].Pod.DeepCopy()
	m.generation++
	pod.UID = types.UID(fmt.Sprintf("%s-moved-%d", e.pods[i].Pod.UID, m.generation))
	m.index[pod.UID] = i
	m.current[i] = pod
	return pod
}

// planNodes is the cluster as the planner sees it: every node's GPUs, free
// CPU and memory, and the pods bound there, all movable (a trace says
// nothing of owners, budgets or gangs): a pod without GPUs moves to free
// CPU and memory.
func (m *migrator) planNodes(e *episode) []gpu.PlanNode {
	byNode := map[string]int{}
	nodes := make([]gpu.PlanNode, 0, len(e.frag.order))
	for _, name := range e.frag.order {
		tn := e.frag.nodes[name]
		byNode[name] = len(nodes)
		nodes = append(nodes, gpu.PlanNode{GPUs: tn.view, Host: m.maxima.Host(tn.free)})
	}
	if m.fleet != nil {
		views := make([]*gpu.NodeGPUs, len(nodes))
		for k := range nodes {
			views[k] = nodes[k].GPUs
		}
		m.fleet.room = gpu.RoomOfViews(nil, views, nil)
	}
	for uid := range e.sched.bound {
		bound := e.sched.measured(uid)
		k, on := byNode[bound.Spec.NodeName]
		if !on {
			continue
		}
		a, ok := gpu.AssignmentOf(bound)
		if ok && a.Node != bound.Spec.NodeName {
			continue // held nowhere the ledger counts it
		}
		d, ok := m.demands[uid]
		if !ok {
			var err error
			if d, err = gpu.PlanDemand(m.planner.Policy, bound); err != nil {
				continue
			}
			m.demands[uid] = d
		}
		nodes[k].Pods = append(nodes[k].Pods, gpu.PlanPod{ID: uid, Demand: d, Held: a, Priority: podPriority(bound), Movable: true})
	}
	for k := range nodes {
		sortBy(nodes[k].Pods, func(p gpu.PlanPod) string { return p.ID })
	}
	return nodes
}

// podPriority is the pod's priority, 0 when unset.
func podPriority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// result is the run's migration statistics.
func (m *migrator) result(placed int) *report.MigrationStats {
	s := m.stats
	if placed > 0 {
		s.MovedPct = report.Round2(100 * float64(s.Moves) / float64(placed))
	}
	if s.GPUMilliPlaced > 0 {
		s.MovesPerGPU = report.Round2(float64(s.Moves) * gpu.MilliPerGPU / float64(s.GPUMilliPlaced))
	}
	return &s
}

// decideOn runs the cycle for pod on one node only, up to committing to it:
// nil when the pod does not fit there.
func (s *scheduler) decideOn(ctx context.Context, pod *v1.Pod, node string) *decision {
	if err := s.refresh(); err != nil {
		return nil
	}
	state := framework.NewCycleState()
	preRes, status, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !status.IsSuccess() || !preRes.AllNodes() && !preRes.NodeNames.Has(node) {
		return nil
	}
	ni, err := s.snapshot.NodeInfos().Get(node)
	if err != nil {
		return nil
	}
	if !s.fw.RunFilterPlugins(ctx, state, pod, ni).IsSuccess() {
		return nil
	}
	return &decision{state: state, pod: pod, nodes: []fwk.NodeInfo{ni}, feasible: []fwk.NodeInfo{ni}, at: []int{0}, node: node}
}

// withMigrations is profiles, each followed by a variant per budget of the
// comma-separated list (ParseMigrationBudget) that moves pods within it,
// named "<profile> +migrations <budget>".
func withMigrations(profiles []Profile, list string) ([]Profile, error) {
	var budgets []MigrationBudget
	for part := range strings.SplitSeq(list, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		b, err := ParseMigrationBudget(part)
		if err != nil {
			return nil, fmt.Errorf("--migrations: %w", err)
		}
		budgets = append(budgets, b)
	}
	if len(budgets) == 0 {
		return profiles, nil
	}
	out := make([]Profile, 0, len(profiles)*(1+len(budgets)))
	for _, p := range profiles {
		out = append(out, p)
		for _, b := range budgets {
			q := p
			q.Name, q.Migrations = p.Name+" +migrations "+b.String(), b
			out = append(out, q)
		}
	}
	return out, nil
}
