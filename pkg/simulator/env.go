package simulator

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// Reward is what an environment step rewards.
type Reward string

const (
	// RewardFragmentation is −(the change of the cluster's fragmented
	// milli-GPU the placement made), in % of GPU capacity.
	RewardFragmentation Reward = "fragmentation"
	// RewardAllocation is the GPU the placement allocated, in % of capacity.
	RewardAllocation Reward = "allocation"
	// RewardUnallocated is 0 until the episode's last step, then
	// −(unallocated GPU % at 100% arrived), simulate's headline; 0 when the
	// workload never reached 100%.
	RewardUnallocated Reward = "unallocated"
)

// Rewards lists the rewards, for validation messages.
var Rewards = []Reward{RewardFragmentation, RewardAllocation, RewardUnallocated}

// EnvOptions is an environment: one cluster, workload and profile, the
// arrival protocol and tie-break, and the reward.
type EnvOptions struct {
	Nodes    []*v1.Node
	Pods     []trace.Pod
	Profile  Profile
	Arrival  trace.Arrival
	TieBreak report.TieBreak
	NoScreen bool
	Reward   Reward
	// ScoreColumns are policies whose scores the observation adds as
	// columns (gpu.PolicyScoreColumn), after gpu.FeatureColumns: what each
	// policy's GPUPlacement would score, 0..1, and 0 where the pod does not
	// fit by it.
	ScoreColumns []gpu.PolicyType
}

// Env is the simulator as a Gymnasium-style environment for an external
// policy (proto/gpusched/policy/v1alpha1, EnvRequest): Reset starts an
// episode exactly as simulate starts a run of the profile with the seed,
// and each Step places the pending pod on the node the agent chooses, where
// simulate places it on the scheduler's own choice (the observation's
// builtin_action). An episode that always takes builtin_action is
// simulate's run.
type Env struct {
	opts     Options
	profile  Profile
	reward   Reward
	capacity int64
	typical  []gpu.TypicalPod
	// names and models are the cluster's nodes in the order of actions and
	// of the observation's rows; index finds a node's.
	names, models []string
	index         map[string]int
	// listed is the positions of the list of nodes last asked about
	// (positions).
	listed  listNumbers
	columns []string
	// rows caches the nodes' rows (envRows); scratch is the buffer their
	// descriptions are written to before they are copied there.
	rows    envRows
	scratch []byte
	// fitsColumn and builtinColumn are the indices of the "fits" and
	// "builtin_score" columns.
	fitsColumn, builtinColumn int
	// scoreTypes are the policies of the score columns after the
	// gpu.FeatureColumns (EnvOptions.ScoreColumns); scorers scores with
	// them in the episode under way (nil until its first observation).
	scoreTypes []gpu.PolicyType
	scorers    *gpuplacement.Scorers
	// scoreWeight is GPUPlacement's Score weight in the episode's
	// framework, which its normalized score is multiplied by; 0 when it
	// does not score, or when its scores are not its policy's (the External
	// strategy in Enforce mode: a policy service's or a model's), so that
	// they cannot stand for the builtin_score column.
	scoreWeight int64
	// noCache describes every node anew at every step (tests).
	noCache bool
	// nextSeed is the seed of a reset without one.
	nextSeed int64
	// probe is the episode's cycle state of a one-GPU pod after PreFilter,
	// which node rows without the pod's columns are described with.
	probe *framework.CycleState
	// demands numbers the demands whose fitting rows are cached
	// (envRows.fit), so that a step finds their rows by index.
	demands map[gpu.DemandKey]int

	ep *episode
	// pending is the observation's decision, mask its action mask; nil
	// when no episode is under way or it is over.
	pending *decision
	mask    []byte
	// fit is the nodes of the mask, for the observation's rows, and fitAt
	// their positions.
	fit     []fwk.NodeInfo
	fitAt   []int
	timings EnvTimings
}

// envRows is the nodes' rows kept from step to step, each at one
// generation of its node, in matrices of a row per node in the order of
// the observation (pointer-free, and copied to an observation in one
// piece): for pods that do not fit the node (values, of gen), and for pods
// that fit, by the demand's number in Env.demands (fit), whose
// builtin_score column is rewritten at each step from the cycle's scores.
type envRows struct {
	// gen is the generation of each node that values describes, -1 for
	// none.
	gen    []int64
	values []byte
	fit    []fitRows
}

// fitRows is the rows of the nodes for one demand that fits them: node i's
// at values[i*width:], described at its generation gen[i] (-1: none).
type fitRows struct {
	gen    []int64
	values []byte
}

// forget marks every row as described at no generation: a new episode's
// nodes are other NodeInfos.
func (r *envRows) forget() {
	for i := range r.gen {
		r.gen[i] = -1
	}
	for k := range r.fit {
		for i := range r.fit[k].gen {
			r.fit[k].gen[i] = -1
		}
	}
}

// maxCachedDemands bounds the demands whose fitting rows are cached (a
// workload has a few hundred); the rows of others are described anew.
const maxCachedDemands = 4096

// EnvTimings is where an environment's time went, summed over its calls.
type EnvTimings struct {
	// Steps counts the pods placed: by Step, by a reset's replayed
	// actions, and by Finish.
	Steps int
	// Schedule is the scheduler's time (Filter, Score, Reserve, bind),
	// Features the observations' node features and mask, Measure the
	// measurements (fragmentation, curve).
	Schedule, Features, Measure time.Duration
	// Wait is ServeEnv's time waiting for requests (the agent's and the
	// pipe's), Codec its time decoding requests and encoding and writing
	// replies.
	Wait, Codec time.Duration
}

// String is the timings per step.
func (t EnvTimings) String() string {
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1e3/float64(max(t.Steps, 1)))
	}
	return fmt.Sprintf("%d steps; per step: schedule %s, features %s, measure %s, codec %s, waiting for the agent %s",
		t.Steps, per(t.Schedule), per(t.Features), per(t.Measure), per(t.Codec), per(t.Wait))
}

// NewEnv is an environment over opts; Reset starts its first episode.
func NewEnv(opts EnvOptions) (*Env, error) {
	if len(opts.Nodes) == 0 || len(opts.Pods) == 0 {
		return nil, fmt.Errorf("an environment needs nodes and pods")
	}
	if opts.Reward == "" {
		opts.Reward = RewardFragmentation
	}
	if !slices.Contains(Rewards, opts.Reward) {
		return nil, fmt.Errorf("reward %q: want %s, %s or %s", opts.Reward, RewardFragmentation, RewardAllocation, RewardUnallocated)
	}
	sim := Options{Nodes: opts.Nodes, Pods: opts.Pods, Profiles: []Profile{opts.Profile}, Arrival: opts.Arrival,
		TieBreak: opts.TieBreak, NoScreen: opts.NoScreen}
	if err := checkArrivalTimes(sim); err != nil {
		return nil, err
	}
	e := &Env{opts: sim, reward: opts.Reward, capacity: trace.CapacityMilli(opts.Nodes), typical: typicalPods(opts.Pods),
		index: map[string]int{}, columns: gpu.FeatureColumns(), nextSeed: 42}
	e.fitsColumn, e.builtinColumn = slices.Index(e.columns, "fits"), slices.Index(e.columns, gpu.BuiltinScoreColumn)
	if len(opts.ScoreColumns) > 0 && findGPUPlacementArgs(opts.Profile.Profile) == nil {
		return nil, fmt.Errorf("score columns %v: profile %s has no %s plugin to score with", opts.ScoreColumns, opts.Profile.Name, gpuplacement.Name)
	}
	for _, t := range opts.ScoreColumns {
		if _, err := gpu.LookupPolicy(string(t)); err != nil {
			return nil, fmt.Errorf("score column: %w", err)
		}
		if slices.Contains(e.scoreTypes, t) {
			return nil, fmt.Errorf("score column %s is asked for twice", t)
		}
		e.scoreTypes = append(e.scoreTypes, t)
		e.columns = append(e.columns, gpu.PolicyScoreColumn(t))
	}
	e.profile = opts.Profile
	for i, n := range opts.Nodes {
		if _, dup := e.index[n.Name]; dup {
			return nil, fmt.Errorf("node %s is listed twice", n.Name)
		}
		e.index[n.Name] = i
		e.names = append(e.names, n.Name)
		model := ""
		if inv, err := gpu.InventoryFromNode(n); err == nil && inv.Len() > 0 {
			model = inv.Devices[0].Model
		}
		e.models = append(e.models, model)
	}
	e.rows = envRows{gen: make([]int64, len(opts.Nodes)), values: make([]byte, 4*len(e.columns)*len(opts.Nodes))}
	e.rows.forget()
	return e, nil
}

// Close ends the episode under way.
func (e *Env) Close() {
	if e.ep != nil {
		e.ep.close()
		e.ep, e.pending, e.probe, e.scorers, e.listed = nil, nil, nil, nil, listNumbers{}
		e.rows.forget()
	}
}

// Timings is where the environment's time went so far.
func (e *Env) Timings() EnvTimings { return e.timings }

// Reset starts an episode with seed (nil: the last seed + 1, from 42),
// advanced to the first pod that fits somewhere, then replays actions (each
// taken as Step takes it, with no observation in between): the state a
// reset with the actions an episode took returns to.
func (e *Env) Reset(ctx context.Context, seed *int64, actions ...int32) (*pb.ResetReply, error) {
	e.Close()
	s := e.nextSeed
	if seed != nil {
		s = *seed
	}
	e.nextSeed = s + 1
	r := &runner{opts: &e.opts, profile: e.profile, seed: s, capacity: e.capacity, typical: e.typical,
		parallelism: runtime.GOMAXPROCS(0), tick: func() {}}
	ep, err := r.newEpisode(ctx)
	if err != nil {
		return nil, err
	}
	e.ep = ep
	e.scoreWeight = 0
	for _, pl := range ep.sched.fw.ListPlugins().Score.Enabled {
		if pl.Name == gpuplacement.Name {
			e.scoreWeight = int64(pl.Weight)
		}
	}
	if args := findGPUPlacementArgs(e.profile.Profile); args != nil && args.ScoringStrategy.Type == config.ScoringStrategyExternal &&
		args.External.Mode != config.ExternalShadow {
		e.scoreWeight = 0
	}
	if len(actions) > 0 && seed == nil {
		e.Close()
		return nil, &ActionError{"actions: replaying needs the episode's seed"}
	}
	if err := e.advance(observeMask); err != nil {
		e.Close()
		return nil, err
	}
	for i, a := range actions {
		if e.pending == nil {
			e.Close()
			return nil, &ActionError{fmt.Sprintf("actions[%d]: the episode ended after %d actions", i, i)}
		}
		if err := e.check(a); err != nil {
			e.Close()
			return nil, &ActionError{fmt.Sprintf("actions[%d]: %v", i, err)}
		}
		e.place(a)
		if err := e.advance(observeMask); err != nil {
			e.Close()
			return nil, err
		}
	}
	var obs *pb.Observation
	if e.pending != nil {
		var err error
		if obs, err = e.observeTimed(e.pending); err != nil {
			e.Close()
			return nil, err
		}
	}
	return &pb.ResetReply{Observation: obs, Info: e.info(), Nodes: e.names, NodeModels: e.models}, nil
}

// ActionError is a step the environment refuses; the episode is unchanged.
type ActionError struct{ msg string }

func (e *ActionError) Error() string { return e.msg }

// Step places the pending pod on node action (an index of ResetReply.nodes
// inside the observation's mask) and advances to the next pod.
func (e *Env) Step(ctx context.Context, action int32) (*pb.StepReply, error) {
	if e.ep == nil {
		return nil, &ActionError{"step before reset: no episode is under way"}
	}
	if err := e.check(action); err != nil {
		return nil, err
	}
	out := &pb.StepReply{Reward: e.place(action)}
	if err := e.advance(observeMask); err != nil {
		return nil, err
	}
	if e.pending != nil {
		var err error
		if out.Observation, err = e.observeTimed(e.pending); err != nil {
			return nil, err
		}
	}
	e.finishReply(out)
	return out, nil
}

// Finish places every remaining pod on the scheduler's own choice, observing
// none, and returns the episode's last step: its reward the sum of the
// steps' rewards.
func (e *Env) Finish(ctx context.Context) (*pb.StepReply, error) {
	if e.ep == nil {
		return nil, &ActionError{"finish before reset: no episode is under way"}
	}
	if e.pending == nil {
		return nil, &ActionError{"the episode is over: reset to start another"}
	}
	out := &pb.StepReply{}
	for e.pending != nil {
		out.Reward += e.place(int32(e.index[e.pending.node]))
		if err := e.advance(observeNothing); err != nil {
			return nil, err
		}
	}
	e.finishReply(out)
	return out, nil
}

// check says why action may not be taken now, or nil.
func (e *Env) check(action int32) error {
	if e.pending == nil {
		return &ActionError{"the episode is over: reset to start another"}
	}
	if action < 0 || int(action) >= len(e.names) || e.mask[action] == 0 {
		return &ActionError{e.refusal(action)}
	}
	return nil
}

// place places the pending pod on node action and returns the step's
// reward (but the final reward of RewardUnallocated, which finishReply
// adds).
func (e *Env) place(action int32) float64 {
	ep := e.ep
	fragBefore := ep.frag.total
	usedBefore := ep.used
	t0 := time.Now()
	ep.place(e.names[action])
	e.timings.Steps++
	e.timings.Schedule += time.Since(t0)
	switch e.reward {
	case RewardFragmentation:
		return -100 * (ep.frag.total - fragBefore) / float64(e.capacity)
	case RewardAllocation:
		return 100 * float64(ep.used-usedBefore) / float64(e.capacity)
	}
	return 0
}

// finishReply fills in a step's info and, at the episode's end, its
// termination and final reward.
func (e *Env) finishReply(out *pb.StepReply) {
	out.Info = e.info()
	if e.pending == nil {
		out.Terminated = true
		if u := out.Info.UnallocatedPctAt_100; u != nil && e.reward == RewardUnallocated {
			out.Reward = -*u
		}
	}
}

// refusal says why action is not allowed, and which are.
func (e *Env) refusal(action int32) string {
	if action < 0 || int(action) >= len(e.names) {
		return fmt.Sprintf("action %d is out of range: want a node index 0..%d whose action_mask byte is 1", action, len(e.names)-1)
	}
	var allowed []string
	n := 0
	for i, m := range e.mask {
		if m == 1 {
			if n++; n <= 20 {
				allowed = append(allowed, fmt.Sprint(i))
			}
		}
	}
	list := strings.Join(allowed, ", ")
	if n > 20 {
		list += ", …"
	}
	return fmt.Sprintf("action %d (node %s) is outside the action mask: the Filter plugins reject pod %s there; allowed: %s (%d of %d nodes)",
		action, e.names[action], e.pending.pod.Name, list, n, len(e.names))
}

// What advance observes of the next pod.
const (
	// observeMask sets the action mask, which the next action is checked
	// against.
	observeMask = true
	// observeNothing leaves the mask as it was: the next action is the
	// scheduler's own (Finish).
	observeNothing = false
)

// advance runs the episode to the next pod that fits somewhere (e.pending;
// nil when the episode is over) and, with observeMask, sets its action
// mask. The observation's rows are observeTimed's.
func (e *Env) advance(mask bool) error {
	sched0, measure0 := e.ep.schedTime, e.ep.metricTime
	d, err := e.ep.advance()
	e.timings.Schedule += e.ep.schedTime - sched0
	e.timings.Measure += e.ep.metricTime - measure0
	e.pending = d
	if err != nil || d == nil || !mask {
		return err
	}
	return e.setMask(d)
}
