package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/gpusched/gpusched/pkg/gpu"
	gpuplugins "github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/plugins/gpudra"
	"github.com/gpusched/gpusched/pkg/plugins/gpugang"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gpupreemption"
	"github.com/gpusched/gpusched/pkg/simulator/report"
)

// Registry is the plugins a simulated profile may use: the in-tree plugins
// and gpusched's, exactly as cmd/gpusched registers them (pkg/plugins; a
// run replaces GPUTelemetry's factory to replay recorded telemetry and
// GPUPlacement's to give it the workload's typical pods, see runRegistry).
func Registry() frameworkruntime.Registry {
	r := plugins.NewInTreeRegistry()
	if err := r.Merge(gpuplugins.Registry()); err != nil {
		panic(err) // a name clash in code, not in input
	}
	return r
}

// unsupportedPlugins need what the simulator does not model: resource claims
// (DynamicResources, GPUDynamicResources; but for the DRA path), preemption (DefaultPreemption, GPUPreemption: a pod
// that fits nowhere is dropped, as the FGD protocol measures, and nothing
// is evicted),
// PodGroups (GPUGang: pods of a gang are placed one by one, as pods without
// one). They are removed from simulated profiles, and with them the queue
// sort GPUGang gives a profile, which the simulator, placing pods in
// arrival order, does not use.
var unsupportedPlugins = []string{dynamicResources, gpudra.Name, "DefaultPreemption", gpupreemption.Name, gpugang.Name}

// dynamicResources is the in-tree plugin that allocates ResourceClaims. A
// run on the DRA path (Options.DRA) keeps it, with the run's draManager as
// the scheduler's DRA manager.
const dynamicResources = "DynamicResources"

// withDRAAllocator is the profile with the plugin that allocates claims on
// the DRA path: GPUDynamicResources in DynamicResources' place when the
// policy chooses the devices (policyDevices), last at each extension point
// (after GPUPlacement, whose PreFilter writes the device order it reads);
// DynamicResources in GPUDynamicResources' place for first fit. The args go
// with the plugin. A profile without GPUPlacement, which chooses the
// devices, keeps DynamicResources.
func withDRAAllocator(p Profile, policyDevices bool) Profile {
	from, to := gpudra.Name, dynamicResources
	if policyDevices && usesGPUPlacement(p.Profile) {
		from, to = dynamicResources, gpudra.Name
	}
	profile := p.Profile.DeepCopy()
	points := reflect.ValueOf(profile.Plugins).Elem()
	for i := range points.NumField() {
		set, ok := points.Field(i).Addr().Interface().(*schedconfig.PluginSet)
		if !ok {
			continue
		}
		if at := slices.IndexFunc(set.Enabled, func(pl schedconfig.Plugin) bool { return pl.Name == from }); at >= 0 {
			weight := set.Enabled[at].Weight
			set.Enabled = append(slices.Delete(set.Enabled, at, at+1), schedconfig.Plugin{Name: to, Weight: weight})
		}
	}
	for i := range profile.PluginConfig {
		if profile.PluginConfig[i].Name == from {
			profile.PluginConfig[i].Name = to
		}
	}
	p.Profile = profile
	return p
}

// scheduler places pods one at a time through one profile's framework, the
// way kube-scheduler's scheduling cycle does: PreFilter, Filter on every
// node, PreScore, Score and NormalizeScore, the run's tie-break among the
// best-scored nodes, Reserve and Permit; then it binds in-process, writing
// the pod as GPUPlacement's Bind writes it, into the scheduler's own cache.
// There is no API server and no informer: the cache and its snapshot are
// the only state.
type scheduler struct {
	fw       framework.Framework
	cache    internalcache.Cache
	snapshot *internalcache.Snapshot
	rng      *rand.Rand
	logger   klog.Logger
	// pct is the share of nodes to score, as the profile configures it.
	pct   *int32
	dirty bool
	// nextNode is where the next partial scan of the nodes starts.
	nextNode int
	// screen, when set, is an exact GPU fit check that runs before the
	// Filter plugins (see fragTracker.screen); nodes it rejects are not filtered.
	screen func(pod *v1.Pod) screenCheck
	bound  map[string]*v1.Pod // by pod UID
	// dra is the run's DRA state on the DRA path; nil otherwise.
	dra *draManager
	// tracked are the bound pods of the DRA path with the GPUs DRA gave
	// them as an assignment annotation, for the run's measurements (the
	// scheduler's cache holds them as bound, without it); by pod UID.
	tracked map[string]*v1.Pod
	// rank orders the nodes for TieBreakNodeOrder: a permutation drawn
	// from the run's seed. nil for TieBreakRandom.
	rank map[string]int
	// memo, when set, remembers the Filter plugins' verdicts and the Score
	// plugins' raw scores per node and pod shape (see nodeMemo).
	memo *nodeMemo
	// filtering is the buffers of filter's scan of every node, reused
	// from cycle to cycle: nothing of them leaves filter.
	filtering struct {
		statuses  []*fwk.Status
		fits      []bool
		todo, run []int
	}
}

// resize is buf with length n, zeroed, reusing its array when it is large
// enough.
func resize[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

// newScheduler builds a run's scheduler over nodes. With dra set, the
// profile keeps DynamicResources and the framework reads DRA from dra.
func newScheduler(ctx context.Context, registry frameworkruntime.Registry, p Profile, nodes []*v1.Node, seed int64, parallelism int, tieBreak report.TieBreak, dra *draManager) (*scheduler, error) {
	metrics.Register() // the framework records into the scheduler's metrics; registers once
	profile := p.Profile.DeepCopy()
	unsupported := unsupportedPlugins
	if dra != nil {
		unsupported = slices.DeleteFunc(slices.Clone(unsupported), func(name string) bool { return name == dynamicResources || name == gpudra.Name })
	}
	stripUnsupported(profile, unsupported)
	snapshot := internalcache.NewEmptySnapshot()
	client := fake.NewClientset()
	opts := []frameworkruntime.Option{
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithParallelism(parallelism),
		frameworkruntime.WithPodNominator(noNominations{}),
	}
	if dra != nil {
		opts = append(opts, frameworkruntime.WithSharedDRAManager(dra))
	}
	f, err := frameworkruntime.NewFramework(ctx, registry, profile, opts...)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	logger := klog.FromContext(ctx)
	s := &scheduler{
		fw:       f,
		cache:    internalcache.New(ctx, nil, false, false),
		snapshot: snapshot,
		rng:      gpu.TieBreakRand(seed),
		logger:   logger,
		pct:      profile.PercentageOfNodesToScore,
		dirty:    true,
		bound:    map[string]*v1.Pod{},
		dra:      dra,
		tracked:  map[string]*v1.Pod{},
	}
	if s.pct == nil {
		s.pct = p.PercentageOfNodesToScore
	}
	for _, n := range nodes {
		s.cache.AddNode(logger, n)
	}
	if tieBreak == report.TieBreakNodeOrder {
		s.rank = make(map[string]int, len(nodes))
		for i, r := range gpu.NodeOrderRank(len(nodes), seed) {
			s.rank[nodes[i].Name] = r
		}
	}
	return s, nil
}

// stripUnsupported removes the unsupported plugins from every extension
// point of a profile.
func stripUnsupported(p *schedconfig.KubeSchedulerProfile, unsupported []string) {
	if p.Plugins == nil {
		return
	}
	hadQueueSort := len(p.Plugins.QueueSort.Enabled) > 0
	points := reflect.ValueOf(p.Plugins).Elem()
	for i := range points.NumField() {
		if set, ok := points.Field(i).Addr().Interface().(*schedconfig.PluginSet); ok {
			set.Enabled = slices.DeleteFunc(set.Enabled, func(pl schedconfig.Plugin) bool {
				return slices.Contains(unsupported, pl.Name)
			})
		}
	}
	if hadQueueSort && len(p.Plugins.QueueSort.Enabled) == 0 {
		// The framework wants one queue sort; the simulator orders pods by arrival.
		p.Plugins.QueueSort.Enabled = []schedconfig.Plugin{{Name: queuesort.Name}}
		p.Plugins.QueueSort.Disabled = nil
	}
	p.PluginConfig = slices.DeleteFunc(p.PluginConfig, func(pc schedconfig.PluginConfig) bool {
		return slices.Contains(unsupported, pc.Name)
	})
}

// placement is the outcome of scheduling one pod.
type placement struct {
	node       string
	assignment gpu.Assignment
	hasGPUs    bool
	// reason is why the pod fits nowhere, as a FailedScheduling event says it.
	reason string
}

// schedule runs one scheduling cycle for pod and, when a node is found,
// binds it there: decide, then commit to the node it chose.
func (s *scheduler) schedule(ctx context.Context, pod *v1.Pod) placement {
	d, failed := s.decide(ctx, pod)
	if d == nil {
		return failed
	}
	return s.commit(ctx, d, d.node)
}

// decision is a scheduling cycle up to the choice of a node: the pod's
// cycle state after PreFilter, Filter, PreScore and Score, the nodes PreFilter
// left and those the Filter plugins accept, and the node the tie-break
// chose among the best-scored (node). The simulator commits to node; the
// environment (env.go) commits to the node its agent chooses.
type decision struct {
	state    *framework.CycleState
	pod      *v1.Pod
	nodes    []fwk.NodeInfo
	feasible []fwk.NodeInfo
	// at is the index in nodes of each feasible node.
	at []int
	// partial is set when Filter scanned only part of nodes
	// (numFeasibleNodesToFind): feasible need not be every node that fits.
	partial bool
	// scores are the feasible nodes' scores; nil when one node is feasible.
	scores []fwk.NodePluginScores
	node   string
}

// decide runs the cycle for pod up to the choice of a node. A nil decision
// means the pod fits nowhere, with the reason in the placement.
func (s *scheduler) decide(ctx context.Context, pod *v1.Pod) (*decision, placement) {
	if err := s.refresh(); err != nil {
		return nil, placement{reason: err.Error()}
	}
	state := framework.NewCycleState()
	preRes, status, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !status.IsSuccess() {
		return nil, placement{reason: status.Message()}
	}
	nodes, err := s.snapshot.NodeInfos().List()
	if err != nil {
		return nil, placement{reason: err.Error()}
	}
	if !preRes.AllNodes() {
		kept := nodes[:0:0]
		for _, n := range nodes {
			if preRes.NodeNames.Has(n.Node().Name) {
				kept = append(kept, n)
			}
		}
		nodes = kept
	}
	d := &decision{state: state, pod: pod, nodes: nodes,
		partial: numFeasibleNodesToFind(s.pct, len(nodes)) < len(nodes)}
	var screen screenCheck
	if s.screen != nil && s.pct != nil && *s.pct == 100 {
		screen = s.screen(pod)
	}
	feasible, at, rejected := s.filter(ctx, state, pod, nodes, screen)
	if len(feasible) == 0 {
		return nil, placement{reason: fitMessage(len(d.nodes), rejected)}
	}
	d.feasible, d.at, d.node = feasible, at, feasible[0].Node().Name
	if len(feasible) > 1 {
		if status := s.fw.RunPreScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
			return nil, placement{reason: status.Message()}
		}
		scores, status := s.score(ctx, d)
		if !status.IsSuccess() {
			return nil, placement{reason: status.Message()}
		}
		d.scores, d.node = scores, s.selectHost(scores)
	}
	return d, placement{}
}

// refresh brings the snapshot up to date with the cache, once pods were
// bound or removed since it was taken.
func (s *scheduler) refresh() error {
	if s.dirty {
		if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
			return err
		}
		s.dirty = false
	}
	return nil
}

// commit ends the decision's cycle on node, one the Filter plugins accept:
// Reserve, Permit, and the bind into the cache.
func (s *scheduler) commit(ctx context.Context, d *decision, node string) placement {
	state, pod := d.state, d.pod
	if s.dra != nil && s.memo != nil && len(pod.Spec.ResourceClaims) > 0 {
		// The DRA plugins' Filter keeps the allocation Reserve writes in
		// the cycle state, and a remembered verdict skipped it.
		nodeInfo, err := s.snapshot.NodeInfos().Get(node)
		if err != nil {
			return placement{reason: err.Error()}
		}
		if status := s.fw.RunFilterPlugins(ctx, state, pod, nodeInfo); !status.IsSuccess() {
			return placement{reason: status.Message()}
		}
	}
	if status := s.fw.RunReservePluginsReserve(ctx, state, pod, node); !status.IsSuccess() {
		s.fw.RunReservePluginsUnreserve(ctx, state, pod, node)
		return placement{reason: status.Message()}
	}
	if _, status := s.fw.RunPermitPlugins(ctx, state, pod, node); !status.IsSuccess() {
		s.fw.RunReservePluginsUnreserve(ctx, state, pod, node)
		return placement{reason: status.Message()}
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = node
	out := placement{node: node}
	if a, ok := gpuplacement.AssignmentFrom(state); ok {
		if bound.Annotations == nil {
			bound.Annotations = map[string]string{}
		}
		bound.Annotations[gpu.AnnotationAssigned] = a.String()
		out.assignment, out.hasGPUs = a, true
	}
	var tracked *v1.Pod
	if s.dra != nil && len(pod.Spec.ResourceClaims) > 0 {
		a, err := s.dra.commit(pod)
		if err != nil {
			s.fw.RunReservePluginsUnreserve(ctx, state, pod, node)
			return placement{reason: err.Error()}
		}
		a.Node = node
		out.assignment, out.hasGPUs = a, true
		tracked = bound.DeepCopy()
		if tracked.Annotations == nil {
			tracked.Annotations = map[string]string{}
		}
		tracked.Annotations[gpu.AnnotationAssigned] = a.String()
	}
	if err := s.cache.AddPod(s.logger, bound); err != nil {
		s.fw.RunReservePluginsUnreserve(ctx, state, pod, node)
		if s.dra != nil {
			s.dra.release(pod)
		}
		return placement{reason: err.Error()}
	}
	s.bound[string(pod.UID)] = bound
	if tracked != nil {
		s.tracked[string(pod.UID)] = tracked
	}
	s.dirty = true
	return out
}

// remove deletes a bound pod, freeing its resources and its claims.
func (s *scheduler) remove(uid string) {
	if pod, ok := s.bound[uid]; ok {
		if err := s.cache.RemovePod(s.logger, pod); err == nil {
			delete(s.bound, uid)
			delete(s.tracked, uid)
			if s.dra != nil {
				s.dra.release(pod)
			}
			s.dirty = true
		}
	}
}

// measured is a bound pod as the run's measurements see it: with the GPUs
// it holds as an assignment annotation. nil when the pod is not bound.
func (s *scheduler) measured(uid string) *v1.Pod {
	if pod := s.tracked[uid]; pod != nil {
		return pod
	}
	return s.bound[uid]
}

// screenNodes runs the screen's check on the nodes at indices and appends
// those it accepts to kept; a node it rejects gets a status with the
// check's reasons in statuses, as the Filter plugins would reject it.
func screenNodes(nodes []fwk.NodeInfo, indices []int, check screenCheck, statuses []*fwk.Status, kept []int) []int {
	if check == nil {
		return append(kept, indices...)
	}
	for _, i := range indices {
		if ok, reasons := check(i, nodes[i].Node().Name); ok {
			kept = append(kept, i)
		} else {
			statuses[i] = fwk.NewStatus(fwk.Unschedulable, reasons...)
		}
	}
	return kept
}

// filter runs the Filter plugins on nodes. When the profile scores every
// node (percentageOfNodesToScore 100, or fewer than 100 nodes), all nodes are
// filtered in parallel and the feasible ones kept in node order, so a seeded
// run is reproducible: a node whose verdict the memo remembers is not
// filtered again, and of the others those the screen rejects (given only
// when every node is scored) are not filtered. Otherwise, like
// kube-scheduler, it scans from where the last cycle stopped until it has
// found enough feasible nodes. at is the index in nodes of each feasible
// node.
func (s *scheduler) filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, screen screenCheck) (feasible []fwk.NodeInfo, at []int, rejected map[string]int) {
	reject := func(st *fwk.Status) {
		if rejected == nil {
			rejected = map[string]int{}
		}
		for _, r := range st.Reasons() {
			rejected[r]++
		}
	}
	want := numFeasibleNodesToFind(s.pct, len(nodes))
	if want >= len(nodes) {
		b := &s.filtering
		b.statuses, b.fits = resize(b.statuses, len(nodes)), resize(b.fits, len(nodes))
		statuses, fits := b.statuses, b.fits
		shape, memo := s.memo.shape(state, pod)
		if memo {
			b.todo = s.memo.recall(shape, nodes, statuses, fits, b.todo[:0])
		} else {
			b.todo = b.todo[:0]
			for i := range nodes {
				b.todo = append(b.todo, i)
			}
		}
		todo := b.todo
		b.run = screenNodes(nodes, todo, screen, statuses, b.run[:0])
		run := b.run
		s.fw.Parallelizer().Until(ctx, len(run), func(k int) {
			i := run[k]
			statuses[i] = s.fw.RunFilterPlugins(ctx, state, pod, nodes[i])
			fits[i] = statuses[i].IsSuccess()
		}, "Filter")
		if memo && ctx.Err() == nil { // a cancelled scan left nodes unfiltered
			s.memo.remember(shape, nodes, statuses, todo)
		}
		for i, ok := range fits {
			if ok {
				feasible, at = append(feasible, nodes[i]), append(at, i)
			}
		}
		if len(feasible) == 0 {
			// Why, for the failure's message; a node that fits has
			// no reasons to count.
			for _, st := range statuses {
				reject(st)
			}
		}
		return feasible, at, rejected
	}
	for i := 0; i < len(nodes) && len(feasible) < want; i++ {
		j := (s.nextNode + i) % len(nodes)
		if st := s.fw.RunFilterPlugins(ctx, state, pod, nodes[j]); st.IsSuccess() {
			feasible, at = append(feasible, nodes[j]), append(at, j)
		} else {
			reject(st)
		}
		if i == len(nodes)-1 || len(feasible) == want {
			s.nextNode = (j + 1) % len(nodes)
		}
	}
	return feasible, at, rejected
}

// numFeasibleNodesToFind is kube-scheduler's rule: with fewer than 100
// nodes, all; else the configured percentage, or 50% − nodes/125 (at least
// 5%) when none is configured; never fewer than 100.
func numFeasibleNodesToFind(pct *int32, nodes int) int {
	const minNodes, minPct = 100, 5
	if nodes < minNodes {
		return nodes
	}
	p := 0
	if pct != nil {
		p = int(*pct)
	}
	if p == 0 {
		p = max(50-nodes/125, minPct)
	}
	return max(nodes*p/100, minNodes)
}

// selectHost picks the best-scored node. Ties go to the first node in the
// run's node order (TieBreakNodeOrder), or to a node drawn uniformly with
// the run's seeded generator (TieBreakRandom, as kube-scheduler does with
// its own).
func (s *scheduler) selectHost(scores []fwk.NodePluginScores) string {
	total := func(i int) int64 { return scores[i].TotalScore }
	if s.rank != nil {
		return scores[gpu.BestByRank(len(scores), total, func(i int) int { return s.rank[scores[i].Name] })].Name
	}
	return scores[gpu.BestAtRandom(len(scores), total, s.rng)].Name
}

// fitMessage summarizes why no node fits, as kube-scheduler's FitError does:
// "0/1213 nodes are available: 800 Insufficient cpu, 413 insufficient free GPUs."
func fitMessage(total int, rejected map[string]int) string {
	parts := make([]string, 0, len(rejected))
	for r, n := range rejected {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return fmt.Sprintf("0/%d nodes are available: %s.", total, strings.Join(parts, ", "))
}

// noNominations: the simulator does not preempt, so no pod is ever nominated.
type noNominations struct{}

func (noNominations) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominations) DeleteNominatedPodIfExists(*v1.Pod)                            {}
func (noNominations) UpdateNominatedPod(klog.Logger, *v1.Pod, fwk.PodInfo)          {}
func (noNominations) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }
