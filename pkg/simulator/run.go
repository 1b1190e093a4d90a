package simulator

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/telemetry"
	"github.com/gpusched/gpusched/pkg/trace"
)

// Options is one simulation: a cluster, a workload, the profiles to compare
// and the seeds to run each with.
type Options struct {
	// Workload names the pod list in reports; "" leaves it unnamed.
	Workload string
	Nodes    []*v1.Node
	Pods     []trace.Pod
	Profiles []Profile
	Seeds    []int64
	Arrival  trace.Arrival
	// TieBreak chooses among equally scored nodes; "" is the arrival
	// mode's default (DefaultTieBreak).
	TieBreak report.TieBreak
	// Parallel is how many runs execute at once; 0 means one per CPU.
	Parallel int
	// NoScreen turns off the GPU screen that spares the Filter plugins nodes
	// GPUPlacement would reject (see fragTracker.screen); results are the
	// same either way, only slower without it.
	NoScreen bool
	// NoMemo turns off the memo of Filter verdicts and raw scores per node
	// and pod shape (see nodeMemo); results are the same either way, only
	// slower without it.
	NoMemo bool
	// Select, when set, limits the runs to those it returns true for, given
	// the indices of the run's profile and seed: a shard of a sweep
	// (Shard.Selects).
	Select func(profile, seed int) bool
	// RecordPlacements keeps every pod's placement in Run.Placements.
	RecordPlacements bool
	// Progress, when set, is called as pods are scheduled, with the pods
	// done and the pods to do over all runs.
	Progress func(done, total int64)
	// Telemetry is recorded GPU telemetry that GPUTelemetry replays at each
	// pod's arrival time (trace.LoadTelemetry); nil leaves it without telemetry.
	Telemetry *telemetry.Replay
	// DRA runs the DRA path (dra.go): the nodes' GPUs are DRA devices, the
	// pods' GPU requests ResourceClaims that DynamicResources allocates.
	// In a profile with GPUPlacement, GPUDynamicResources takes
	// DynamicResources' place, so that the claims get the devices the
	// policy chooses, unless DRAFirstFit is set.
	DRA bool
	// DRAFirstFit keeps DynamicResources on the DRA path: claims get the
	// first devices that fit, in the order the slices list them, while
	// the profile's plugins rank the nodes.
	DRAFirstFit bool
}

// Simulate runs every profile with every seed (those opts.Select selects),
// in parallel, and returns the runs in profile then seed order.
func Simulate(ctx context.Context, opts Options) ([]report.Run, error) {
	if len(opts.Nodes) == 0 || len(opts.Pods) == 0 || len(opts.Profiles) == 0 || len(opts.Seeds) == 0 {
		return nil, fmt.Errorf("a simulation needs nodes, pods, profiles and seeds")
	}
	if err := checkArrivalTimes(opts); err != nil {
		return nil, err
	}
	if err := checkMigrations(opts); err != nil {
		return nil, err
	}
	parallel := cmp.Or(opts.Parallel, runtime.GOMAXPROCS(0))
	type job struct{ profile, seed int }
	var jobs []job
	for p := range opts.Profiles {
		for s := range opts.Seeds {
			if opts.Select == nil || opts.Select(p, s) {
				jobs = append(jobs, job{p, s})
			}
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	parallel = min(parallel, len(jobs))
	// Cores left over by concurrent runs go to each run's Filter and Score.
	perRun := max(1, runtime.GOMAXPROCS(0)/parallel)

	capacity := trace.CapacityMilli(opts.Nodes)
	typical := typicalPods(opts.Pods)
	var done atomic.Int64
	total := int64(len(jobs)) * int64(expectedEvents(opts, capacity))
	tick := func() {
		if opts.Progress != nil {
			opts.Progress(done.Add(1), total)
		}
	}

	runs := make([]report.Run, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for i := range next {
				j := jobs[i]
				r := &runner{opts: &opts, profile: opts.Profiles[j.profile], seed: opts.Seeds[j.seed],
					capacity: capacity, typical: typical, parallelism: perRun, tick: tick}
				runs[i], errs[i] = r.run(ctx)
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// checkArrivalTimes refuses a replay of pods without creation and deletion
// times.
func checkArrivalTimes(opts Options) error {
	if opts.Arrival == trace.ArrivalReplay {
		for _, p := range opts.Pods {
			if !p.HasTimes {
				return fmt.Errorf("arrival %q needs creation and deletion times, and pod %s has none", trace.ArrivalReplay, p.Pod.Name)
			}
		}
	}
	return nil
}

// expectedEvents estimates the pods one run schedules, for progress.
func expectedEvents(opts Options, capacity int64) int {
	if opts.Arrival == trace.ArrivalReplay {
		return len(opts.Pods)
	}
	return len(trace.FGDSequence(opts.Pods, 0, capacity))
}

// runner is one (profile, seed) run.
type runner struct {
	opts        *Options
	profile     Profile
	seed        int64
	capacity    int64
	typical     []gpu.TypicalPod
	parallelism int
	tick        func()
}

// run drives the run's episode with the scheduler's own choice of node for
// every pod.
func (r *runner) run(ctx context.Context) (report.Run, error) {
	e, err := r.newEpisode(ctx)
	if err != nil {
		return report.Run{}, err
	}
	defer e.close()
	for {
		d, err := e.advance()
		if err != nil {
			return report.Run{}, err
		}
		if d == nil {
			return e.result(), nil
		}
		e.place(d.node)
	}
}

// episode is one run, stepped pod by pod: advance runs the events up to
// the next pod that fits somewhere and decides where the scheduler would
// place it, place binds it on a node (the scheduler's choice, or the
// environment's agent's), and result is the run's outcome once every event
// is done. Pods that fit nowhere, and departures, are handled within
// advance, as they need no choice.
type episode struct {
	r      *runner
	cancel context.CancelFunc
	ctx    context.Context
	start  time.Time
	sched  *scheduler
	dra    *draManager
	// traceOf is, on the DRA path, the trace pod each claim pod was made
	// from, for the screen to read its GPU request.
	traceOf map[*v1.Pod]*v1.Pod
	clock   *replayClock
	frag    *fragTracker
	curve   *curve
	pods    []trace.Pod
	events  []trace.Event
	// next is the index of the next event to run.
	next                  int
	arrived, used         int64
	placedMilli           map[int]int64
	out                   report.Run
	schedTime, metricTime time.Duration
	// migrator moves pods to make room for pods that fit nowhere; nil
	// when the profile's budget moves none.
	migrator *migrator
	// pending is the decision advance returned, until place; pendingPod
	// and pendingDemand are its pod's index in pods and its GPU request.
	pending       *decision
	pendingPod    int
	pendingDemand int64
}

func (r *runner) newEpisode(ctx context.Context) (*episode, error) {
	e := &episode{r: r, start: time.Now(), clock: &replayClock{}, placedMilli: map[int]int64{}}
	// The framework and the cache start goroutines that hold the run's
	// state until their context ends: end it with the episode (close).
	e.ctx, e.cancel = context.WithCancel(ctx)
	tieBreak := cmp.Or(r.opts.TieBreak, report.DefaultTieBreak(r.opts.Arrival))
	registry, err := runRegistry(r.opts.Telemetry, e.clock, r.typical)
	if err != nil {
		e.cancel()
		return nil, err
	}
	nodes := r.opts.Nodes
	if r.opts.DRA {
		var published []*resourceapi.ResourceSlice
		nodes, published = draNodes(nodes)
		e.dra = newDRAManager(published)
	}
	profile := r.profile
	if r.opts.DRA {
		profile = withDRAAllocator(profile, !r.opts.DRAFirstFit)
	}
	if e.sched, err = newScheduler(e.ctx, registry, profile, nodes, r.seed, r.parallelism, tieBreak, e.dra); err != nil {
		e.cancel()
		return nil, err
	}
	e.out = report.Run{Policy: r.profile.Name, Seed: r.seed, FailureReasons: map[string]int{}}
	e.frag = newFragTracker(r.opts.Nodes, r.typical)
	if !r.opts.NoScreen && filtersWithGPUPlacement(r.profile) {
		e.sched.screen = e.frag.screen
		if e.dra != nil {
			e.sched.screen = nil
			if !describesDevices(r.opts.Nodes) {
				e.traceOf = map[*v1.Pod]*v1.Pod{}
				e.sched.screen = e.frag.screenClaims(e.traceOf)
			}
		}
	}
	if !r.opts.NoMemo {
		e.sched.memo = newNodeMemo(filterNames(e.sched.fw), scoreNames(e.sched.fw), e.dra, r.opts.Telemetry != nil, holdReservations(r.opts.Nodes))
	}
	e.curve = newCurve(r.capacity)
	if !r.profile.Migrations.IsZero() {
		if e.migrator, err = newRunMigrator(r.profile, r.opts.Nodes, r.typical); err != nil {
			e.close()
			return nil, err
		}
	}
	e.pods = r.opts.Pods
	if r.opts.Arrival == trace.ArrivalReplay {
		e.events = trace.ReplayEvents(e.pods)
	} else {
		e.pods = trace.FGDSequence(e.pods, r.seed, r.capacity)
		e.events = make([]trace.Event, len(e.pods))
		for i := range e.pods {
			e.events[i] = trace.Event{Pod: i}
		}
	}
	if e.migrator != nil {
		e.migrator.index = make(map[types.UID]int, len(e.pods))
		for i := range e.pods {
			e.migrator.index[e.pods[i].Pod.UID] = i
		}
		if len(e.events) > 0 {
			e.migrator.firstSec = e.events[0].Time
		}
	}
	return e, nil
}

// close lets go of what the episode's framework and cache hold.
func (e *episode) close() {
	// The plugins let go of what they registered for the run's framework.
	e.sched.fw.Close()
	e.cancel()
}

// advance runs the events up to the next pod that fits on some node and
// returns the scheduler's decision for it, to be placed (place) before
// advance is called again; nil when the events are done.
func (e *episode) advance() (*decision, error) {
	r := e.r
	for e.next < len(e.events) {
		if err := e.ctx.Err(); err != nil {
			return nil, err
		}
		i, ev := e.next, e.events[e.next]
		e.next++
		if r.opts.Arrival == trace.ArrivalReplay {
			e.clock.set(ev.Time)
		} else {
			e.clock.set(int64(i))
		}
		pod := e.pods[ev.Pod].Pod
		if ev.Depart {
			uid := string(pod.UID)
			if e.migrator != nil {
				if moved := e.migrator.current[ev.Pod]; moved != nil {
					uid = string(moved.UID)
				}
			}
			t0 := time.Now()
			e.unbind(ev.Pod, uid)
			e.schedTime += time.Since(t0)
			if e.migrator != nil {
				e.migrator.changed()
			}
			continue
		}
		demand := trace.DemandMilli(e.pods[ev.Pod])
		if e.out.StrandedAt100 == nil && r.opts.Arrival != trace.ArrivalReplay && e.arrived+demand > r.capacity {
			// The pods before this one are the floors' (workloadFloors).
			e.out.StrandedAt100 = strandedAt(e.frag, e.sched)
		}
		e.arrived += demand
		e.out.Submitted++
		if e.dra != nil {
			claimPod, claim, err := draPod(pod)
			if err != nil {
				return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
			}
			if claim != nil {
				e.dra.add(claim)
				if e.traceOf != nil {
					e.traceOf[claimPod] = pod
				}
			}
			pod = claimPod
		}
		t0 := time.Now()
		d, failed := e.sched.decide(e.ctx, pod)
		if d == nil && e.migrator != nil {
			d = e.migrator.makeRoom(e, pod)
		}
		e.schedTime += time.Since(t0)
		delete(e.traceOf, pod)
		if d != nil {
			e.pending, e.pendingPod, e.pendingDemand = d, ev.Pod, demand
			return d, nil
		}
		e.record(pod, failed, ev.Pod, demand)
	}
	return nil, nil
}

// place binds the pending decision's pod on node, one the Filter plugins
// accept, and records the outcome.
func (e *episode) place(node string) placement {
	d := e.pending
	e.pending = nil
	t0 := time.Now()
	p := e.sched.commit(e.ctx, d, node)
	e.schedTime += time.Since(t0)
	e.record(d.pod, p, e.pendingPod, e.pendingDemand)
	return p
}

// record counts one arrival's outcome and adds it to the measurements.
func (e *episode) record(pod *v1.Pod, p placement, podIndex int, demand int64) {
	if e.r.opts.RecordPlacements {
		if e.migrator != nil {
			e.migrator.placement[podIndex] = len(e.out.Placements)
		}
		e.out.Placements = append(e.out.Placements, report.PodPlacement{Pod: pod.Name, Node: p.node, GPUs: p.assignment.Devices, Reason: p.reason})
	}
	t1 := time.Now()
	if p.node == "" {
		e.out.Failed++
		e.out.FailedGPUMilli += demand
		e.out.FailureReasons[p.reason]++
	} else {
		e.out.Placed++
		if p.hasGPUs {
			m := p.assignment.Milli * int64(len(p.assignment.Devices))
			e.placedMilli[podIndex] = m
			e.used += m
		}
		e.frag.bind(e.sched.measured(string(pod.UID)))
	}
	e.curve.record(e.arrived, e.used, e.frag.total)
	e.metricTime += time.Since(t1)
	e.r.tick()
}

// unbind takes the bound pod of uid, pods[podIndex], off its node, as it
// departs or moves; nothing when it is not bound.
func (e *episode) unbind(podIndex int, uid string) {
	bound := e.sched.measured(uid)
	if bound == nil {
		return
	}
	e.sched.remove(uid)
	e.used -= e.placedMilli[podIndex]
	delete(e.placedMilli, podIndex)
	e.frag.unbind(bound)
}

// lose counts pods[podIndex], taken off its node to move and placed
// nowhere, as failed.
func (e *episode) lose(podIndex int) {
	e.out.Placed--
	e.out.Failed++
	if k, recorded := e.migrator.placement[podIndex]; recorded && e.r.opts.RecordPlacements {
		e.out.Placements[k] = report.PodPlacement{Pod: e.out.Placements[k].Pod, Reason: "taken off its node to move and placed nowhere", Moves: e.out.Placements[k].Moves + 1}
	}
}

// bind counts pod, pods[podIndex], just committed to a node again (a moved
// pod's replacement), in the measurements and its recorded placement.
func (e *episode) bind(podIndex int, pod *v1.Pod) {
	bound := e.sched.measured(string(pod.UID))
	a, ok := gpu.AssignmentOf(bound)
	if ok {
		m := a.Milli * int64(len(a.Devices))
		e.placedMilli[podIndex] = m
		e.used += m
	}
	e.frag.bind(bound)
	if k, recorded := e.migrator.placement[podIndex]; recorded && e.r.opts.RecordPlacements {
		pl := &e.out.Placements[k]
		pl.Node, pl.GPUs = bound.Spec.NodeName, a.Devices
		pl.Moves++
	}
}

// result is the run's outcome, once advance has returned nil.
func (e *episode) result() report.Run {
	out := e.out
	out.Curve = e.curve.points()
	if a, ok := e.curve.allocatedAt(100); ok {
		u := report.Round2(100 - a)
		out.UnallocatedPctAt100 = &u
	}
	out.ByModel = e.frag.byModel()
	out.WallSeconds = time.Since(e.start).Seconds()
	out.SchedulingSeconds = e.schedTime.Seconds()
	out.MetricsSeconds = e.metricTime.Seconds()
	if e.migrator != nil {
		out.Migrations = e.migrator.result(out.Placed)
	}
	return out
}

// typicalPods is the workload's typical pod shapes (see gpu.TypicalPods),
// CPU counted as the scheduler scores it (a missing request is 100m).
func typicalPods(pods []trace.Pod) []gpu.TypicalPod {
	demands := make([]gpu.Demand, 0, len(pods))
	for _, p := range pods {
		if d, ok := gpu.ShapeOf(p.Pod); ok {
			demands = append(demands, d)
		}
	}
	return gpu.TypicalPods(demands)
}

func sortBy[T any, K cmp.Ordered](s []T, key func(T) K) {
	slices.SortFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}
