package simulator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// newTestEnv is an environment over the synthetic cluster of 24 nodes and
// its workload, with the policy's profile.
func newTestEnv(t *testing.T, policy string, arrival trace.Arrival, tieBreak report.TieBreak) (*Env, Options) {
	t.Helper()
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 24})
	profile := defaultProfiles(t, policy)[0]
	env, err := NewEnv(EnvOptions{Nodes: nodes, Pods: pods, Profile: profile, Arrival: arrival, TieBreak: tieBreak})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env, Options{Nodes: nodes, Pods: pods, Profiles: []Profile{profile}, Arrival: arrival, TieBreak: tieBreak}
}

// TestEnvironmentBuiltinReproducesSimulate: an episode that always takes
// builtin_action is simulate's run of the same profile and seed — same
// unallocated % at 100% arrived, same placed and failed pods — with either
// tie-break (node-order draws the node order from the seed, random draws
// every tie from it).
func TestEnvironmentBuiltinReproducesSimulate(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		arrival  trace.Arrival
		tieBreak report.TieBreak
	}{
		{"FragFit", trace.ArrivalFGD, report.TieBreakNodeOrder},
		{"FragFit", trace.ArrivalFGD, report.TieBreakRandom},
		{"BestFit", trace.ArrivalFGD, report.TieBreakRandom},
		{"BestFit", trace.ArrivalReplay, report.TieBreakRandom},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.policy, tc.arrival, tc.tieBreak), func(t *testing.T) {
			env, opts := newTestEnv(t, tc.policy, tc.arrival, tc.tieBreak)
			for _, seed := range []int64{1, 7} {
				opts.Seeds = []int64{seed}
				runs, err := Simulate(context.Background(), opts)
				if err != nil {
					t.Fatal(err)
				}
				want := runs[0]
				info, steps := runBuiltin(t, env, seed)
				if want.UnallocatedPctAt100 == nil || info.UnallocatedPctAt_100 == nil {
					t.Fatalf("seed %d: unallocated at 100%%: simulate %v, environment %v; want both set", seed, want.UnallocatedPctAt100, info.UnallocatedPctAt_100)
				}
				if got := *info.UnallocatedPctAt_100; got != *want.UnallocatedPctAt100 || int(info.PlacedPods) != want.Placed || int(info.FailedPods) != want.Failed {
					t.Errorf("seed %d: environment unallocated %.2f%%, placed %d, failed %d; simulate %.2f%%, %d, %d",
						seed, got, info.PlacedPods, info.FailedPods, *want.UnallocatedPctAt100, want.Placed, want.Failed)
				}
				// Every placed pod took one step.
				if steps != want.Placed {
					t.Errorf("seed %d: %d steps, want one per placed pod (%d)", seed, steps, want.Placed)
				}
			}
		})
	}
}

// runBuiltin runs an episode taking builtin_action at every step and returns
// its last info and its steps.
func runBuiltin(t *testing.T, env *Env, seed int64) (*pb.Info, int) {
	t.Helper()
	ctx := context.Background()
	reset, err := env.Reset(ctx, &seed)
	if err != nil {
		t.Fatal(err)
	}
	obs, steps := reset.Observation, 0
	for {
		reply, err := env.Step(ctx, obs.BuiltinAction)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		steps++
		if reply.Terminated {
			return reply.Info, steps
		}
		obs = reply.Observation
	}
}

// TestEnvironmentMaskMatchesFilter runs an episode that takes the last
// allowed node (not the scheduler's choice, to reach other states) and
// checks at every step that the mask is exactly the nodes on which every
// Filter plugin accepts the pod, run here on every node, and that the rows
// have one row per node with fits = the mask.
func TestEnvironmentMaskMatchesFilter(t *testing.T) {
	env, _ := newTestEnv(t, "FragFit", trace.ArrivalFGD, report.TieBreakNodeOrder)
	ctx := context.Background()
	seed := int64(3)
	reset, err := env.Reset(ctx, &seed)
	if err != nil {
		t.Fatal(err)
	}
	if len(reset.Nodes) != 24 || len(reset.NodeModels) != 24 {
		t.Fatalf("%d nodes, %d models; want 24 of each", len(reset.Nodes), len(reset.NodeModels))
	}
	obs, masked := reset.Observation, 0
	for step := 0; ; step++ {
		want := make([]byte, len(reset.Nodes))
		all, err := env.ep.sched.snapshot.NodeInfos().List()
		if err != nil {
			t.Fatal(err)
		}
		for _, ni := range all {
			if env.ep.sched.fw.RunFilterPlugins(ctx, env.pending.state, env.pending.pod, ni).IsSuccess() {
				want[env.index[ni.Node().Name]] = 1
			}
		}
		if string(obs.ActionMask) != string(want) {
			t.Fatalf("step %d, pod %s: mask %v, Filter accepts %v", step, obs.Pod.Name, obs.ActionMask, want)
		}
		if obs.ActionMask[obs.BuiltinAction] != 1 {
			t.Fatalf("step %d: builtin action %d is outside the mask", step, obs.BuiltinAction)
		}
		rows, cols := int(obs.Nodes.Rows), len(obs.Nodes.Columns)
		if rows != 24 || len(obs.Nodes.Values) != 4*rows*cols {
			t.Fatalf("step %d: %d rows, %d bytes; want 24 rows of %d float32", step, rows, len(obs.Nodes.Values), cols)
		}
		for i, m := range obs.ActionMask {
			if fits := featureValue(obs.Nodes, i, env.fitsColumn); fits != float32(m) {
				t.Fatalf("step %d: node %d fits = %v, mask %d", step, i, fits, m)
			}
			masked += 1 - int(m)
		}
		last := 0
		for i, m := range obs.ActionMask {
			if m == 1 {
				last = i
			}
		}
		reply, err := env.Step(ctx, int32(last))
		if err != nil {
			t.Fatal(err)
		}
		if reply.Terminated {
			break
		}
		obs = reply.Observation
	}
	if masked == 0 {
		t.Error("no node was ever outside the mask: the test checks nothing")
	}
}

// TestEnvironmentRejectsMaskedAction: a step outside the mask or out of
// range is refused with the action and what is allowed, and the episode is
// as it was: the same pod is still pending.
func TestEnvironmentRejectsMaskedAction(t *testing.T) {
	env, _ := newTestEnv(t, "BestFit", trace.ArrivalFGD, report.TieBreakNodeOrder)
	ctx := context.Background()
	if _, err := env.Step(ctx, 0); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("step before reset: %v, want an error saying to reset", err)
	}
	reset, err := env.Reset(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the cluster with the scheduler's choices until some node is
	// outside the mask.
	obs := reset.Observation
	for !strings.Contains(string(obs.ActionMask), "\x00") {
		reply, err := env.Step(ctx, obs.BuiltinAction)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Terminated {
			t.Fatal("the episode ended with every node in every mask")
		}
		obs = reply.Observation
	}
	masked := strings.IndexByte(string(obs.ActionMask), 0)
	before := env.info()
	for _, tc := range []struct {
		action int32
		want   string
	}{
		{int32(masked), fmt.Sprintf("action %d (node %s) is outside the action mask", masked, reset.Nodes[masked])},
		{-1, "action -1 is out of range: want a node index 0..23"},
		{24, "action 24 is out of range"},
	} {
		_, err := env.Step(ctx, tc.action)
		var refused *ActionError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("step %d: %v, want an ActionError containing %q", tc.action, err, tc.want)
		}
	}
	if after := env.info(); !proto.Equal(before, after) || env.pending.pod.Name != obs.Pod.Name {
		t.Errorf("refused steps changed the episode: %v → %v", before, after)
	}
	// Over the wire the refusal is an error reply.
	reply := env.Handle(ctx, &pb.EnvRequest{Call: &pb.EnvRequest_Step{Step: &pb.StepRequest{Action: int32(masked)}}})
	if !strings.Contains(reply.GetError(), "outside the action mask") {
		t.Errorf("reply %v, want an error", reply)
	}
	if _, err := env.Step(ctx, obs.BuiltinAction); err != nil {
		t.Errorf("the builtin action after refusals: %v", err)
	}
}

// featureValue is row i, column j of a feature matrix.
func featureValue(m *pb.FeatureMatrix, i, j int) float32 {
	off := 4 * (i*len(m.Columns) + j)
	b := m.Values[off : off+4]
	return math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}

// TestEnvironmentCachedRowsMatchFeatures: the rows taken from the caches,
// of fitting nodes with the built-in score from the cycle's scores and of
// the others, are the rows GPUPlacement's feature extractor describes
// anew, byte for byte, at every step of an episode.
func TestEnvironmentCachedRowsMatchFeatures(t *testing.T) {
	for _, policy := range []string{"FragFit", "BestFit"} {
		t.Run(policy, func(t *testing.T) {
			cached, _ := newTestEnv(t, policy, trace.ArrivalFGD, report.TieBreakRandom)
			fresh, _ := newTestEnv(t, policy, trace.ArrivalFGD, report.TieBreakRandom)
			fresh.noCache = true
			ctx := context.Background()
			// Two episodes: the second reuses the demands' numbers of the
			// first, with the rows of every node described anew.
			for _, seed := range []int64{5, 6} {
				a, err := cached.Reset(ctx, &seed)
				if err != nil {
					t.Fatal(err)
				}
				b, err := fresh.Reset(ctx, &seed)
				if err != nil {
					t.Fatal(err)
				}
				x, y := a.Observation, b.Observation
				for step := 0; ; step++ {
					if !proto.Equal(x, y) {
						t.Fatalf("seed %d, step %d, pod %s: cached and fresh observations differ", seed, step, x.Pod.Name)
					}
					ra, err := cached.Step(ctx, x.BuiltinAction)
					if err != nil {
						t.Fatal(err)
					}
					rb, err := fresh.Step(ctx, y.BuiltinAction)
					if err != nil {
						t.Fatal(err)
					}
					if ra.Terminated || rb.Terminated {
						if ra.Terminated != rb.Terminated {
							t.Fatalf("seed %d, step %d: terminated %v and %v", seed, step, ra.Terminated, rb.Terminated)
						}
						break
					}
					x, y = ra.Observation, rb.Observation
				}
			}
		})
	}
}

// BenchmarkEnvironmentTrace is one episode of the default trace driven by
// builtin_action, in Go: the environment's cost without the pipe and the
// agent (python/examples/bench_env.py measures both).
func BenchmarkEnvironmentTrace(b *testing.B) {
	opts, _ := loadTrace(b, "openb_pod_list_default.csv")
	env, err := NewEnv(EnvOptions{Nodes: opts.Nodes, Pods: opts.Pods, Profile: defaultProfiles(b)[0], Arrival: trace.ArrivalFGD})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	for b.Loop() {
		seed := int64(42)
		reset, err := env.Reset(ctx, &seed)
		if err != nil {
			b.Fatal(err)
		}
		obs := reset.Observation
		for {
			reply, err := env.Step(ctx, obs.BuiltinAction)
			if err != nil {
				b.Fatal(err)
			}
			if reply.Terminated {
				break
			}
			obs = reply.Observation
		}
	}
	t := env.Timings()
	b.ReportMetric(float64(t.Steps)/b.Elapsed().Seconds(), "steps/s")
}

// TestEnvironmentReplayAndFinish: a reset with the actions an episode took
// returns to the same state, observation for observation; Finish from
// there places the rest as the scheduler does, ending where stepping
// builtin_action to the end ends; and a replayed action the mask refuses
// fails the reset, naming its position.
func TestEnvironmentReplayAndFinish(t *testing.T) {
	env, opts := newTestEnv(t, "FragFit", trace.ArrivalFGD, report.TieBreakNodeOrder)
	ctx := context.Background()
	seed := int64(5)
	// An episode that takes the last allowed node, to reach states the
	// scheduler would not.
	reset, err := env.Reset(ctx, &seed)
	if err != nil {
		t.Fatal(err)
	}
	var actions []int32
	var observed []*pb.Observation
	obs := reset.Observation
	for {
		observed = append(observed, obs)
		a := int32(strings.LastIndexByte(string(obs.ActionMask), 1))
		actions = append(actions, a)
		reply, err := env.Step(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Terminated {
			break
		}
		obs = reply.Observation
	}
	if len(actions) < 20 {
		t.Fatalf("%d steps: too short an episode to branch from", len(actions))
	}
	for _, k := range []int{0, 1, len(actions) / 2, len(actions) - 1} {
		replayed, err := env.Reset(ctx, &seed, actions[:k]...)
		if err != nil {
			t.Fatalf("reset with %d actions: %v", k, err)
		}
		if !proto.Equal(replayed.Observation, observed[k]) {
			t.Errorf("reset with %d actions: the observation differs from the one the episode made there", k)
		}
		// The rollout from here under the built-in policy, stepped and
		// finished.
		stepped := replayed.Observation
		var last *pb.StepReply
		for {
			if last, err = env.Step(ctx, stepped.BuiltinAction); err != nil {
				t.Fatal(err)
			}
			if last.Terminated {
				break
			}
			stepped = last.Observation
		}
		if _, err := env.Reset(ctx, &seed, actions[:k]...); err != nil {
			t.Fatal(err)
		}
		finished, err := env.Finish(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !finished.Terminated || !proto.Equal(finished.Info, last.Info) {
			t.Errorf("from step %d: finish ended at %v, stepping at %v", k, finished.Info, last.Info)
		}
	}
	// Finish from the start is simulate's run.
	opts.Seeds = []int64{seed}
	runs, err := Simulate(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Reset(ctx, &seed); err != nil {
		t.Fatal(err)
	}
	finished, err := env.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := finished.Info.GetUnallocatedPctAt_100(), *runs[0].UnallocatedPctAt100; got != want || int(finished.Info.PlacedPods) != runs[0].Placed {
		t.Errorf("finish from the start: %.2f%% unallocated, %d placed; simulate %.2f%%, %d", got, finished.Info.PlacedPods, want, runs[0].Placed)
	}
	if _, err := env.Finish(ctx); err == nil || !strings.Contains(err.Error(), "the episode is over") {
		t.Errorf("finish after the end: %v", err)
	}

	// A replayed action outside the mask: find a step whose mask refuses a
	// node, and replay that node there.
	k := slices.IndexFunc(observed, func(o *pb.Observation) bool { return strings.IndexByte(string(o.ActionMask), 0) >= 0 })
	if k < 0 {
		t.Fatal("no step had a node outside the mask")
	}
	bad := append(slices.Clone(actions[:k]), int32(strings.IndexByte(string(observed[k].ActionMask), 0)))
	reply := env.Handle(ctx, &pb.EnvRequest{Call: &pb.EnvRequest_Reset_{Reset_: &pb.ResetRequest{Seed: &seed, Actions: bad}}})
	if want := fmt.Sprintf("reset: actions[%d]: action %d", k, bad[k]); !strings.HasPrefix(reply.GetError(), want) || !strings.Contains(reply.GetError(), "outside the action mask") {
		t.Errorf("reset replaying a masked action: %v, want an error starting %q", reply, want)
	}
	if _, err := env.Step(ctx, 0); err == nil {
		t.Error("after a failed reset an episode is under way")
	}
	if _, err := env.Reset(ctx, nil, actions[:3]...); err == nil || !strings.Contains(err.Error(), "replaying needs the episode's seed") {
		t.Errorf("replay without a seed: %v", err)
	}
	// Replaying every action ends the episode: no observation, the final
	// info.
	all, err := env.Reset(ctx, &seed, actions...)
	if err != nil {
		t.Fatal(err)
	}
	if all.Observation != nil || all.Info.UnallocatedPctAt_100 == nil {
		t.Errorf("reset replaying the whole episode: observation %v, info %v; want none and the final info", all.Observation != nil, all.Info)
	}
	long := append(slices.Clone(actions), 0)
	if _, err := env.Reset(ctx, &seed, long...); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("actions[%d]: the episode ended after %d actions", len(actions), len(actions))) {
		t.Errorf("reset replaying past the end: %v", err)
	}
}

// TestEnvironmentScoreColumns: a policy's score column is what its own
// GPUPlacement scores. In episodes of FragFit, FGD and BestFit with
// BestFit, FragFit and FGD score columns, the column of the episode's own
// policy equals builtin_score (the cycle's normalized scores) at every step;
// at the reset (an empty cluster, the same first pod) every episode's
// column of a policy equals builtin_score of that policy's episode, the
// pod read as that policy reads it (BestFit leaves CPU and memory out);
// every column is 0 off the mask and within 0..1; and another policy's
// column differs from builtin_score somewhere (it is not a copy). Unknown or
// repeated policies are refused.
func TestEnvironmentScoreColumns(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 24})
	column := func(obs *pb.Observation, name string) []float32 {
		t.Helper()
		k := slices.Index(obs.Nodes.Columns, name)
		if k < 0 {
			t.Fatalf("no column %s in %v", name, obs.Nodes.Columns)
		}
		out := make([]float32, obs.Nodes.Rows)
		for i := range out {
			out[i] = featureValue(obs.Nodes, i, k)
		}
		return out
	}
	columns := []gpu.PolicyType{"BestFit", "FragFit", "FGD"}
	ctx := context.Background()
	seed := int64(3)
	first := map[gpu.PolicyType]*pb.Observation{} // each episode's first observation
	for _, own := range columns {
		t.Run(string(own), func(t *testing.T) {
			env, err := NewEnv(EnvOptions{Nodes: nodes, Pods: pods, Profile: defaultProfiles(t, string(own))[0],
				Arrival: trace.ArrivalFGD, TieBreak: report.TieBreakNodeOrder, ScoreColumns: columns})
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			reset, err := env.Reset(ctx, &seed)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := reset.Observation.Nodes.Columns, append(gpu.FeatureColumns(), "BestFit_score", "FragFit_score", "FGD_score"); !slices.Equal(got, want) {
				t.Fatalf("columns %v, want %v", got, want)
			}
			first[own] = reset.Observation
			obs, nonzero, differ, cpuOnlyScored := reset.Observation, 0, 0, 0
			for step := 0; ; step++ {
				builtin := column(obs, "builtin_score")
				// BestFit weighs GPUs alone and does not score a pod
				// without them; the host-aware policies do.
				if obs.Pod.Gpus == 0 {
					for i, v := range column(obs, "BestFit_score") {
						if v != 0 {
							t.Fatalf("step %d, pod %s without GPUs, node %s: BestFit_score %v, want 0", step, obs.Pod.Name, env.names[i], v)
						}
					}
					for _, policy := range []gpu.PolicyType{"FragFit", "FGD"} {
						for i, v := range column(obs, gpu.PolicyScoreColumn(policy)) {
							if v != 0 && obs.ActionMask[i] == 1 {
								cpuOnlyScored++
							}
						}
					}
				}
				for _, policy := range columns {
					got := column(obs, gpu.PolicyScoreColumn(policy))
					for i, v := range got {
						switch {
						case policy == own && v != builtin[i]:
							t.Fatalf("step %d, node %s: %s %v, want builtin_score %v", step, env.names[i], gpu.PolicyScoreColumn(policy), v, builtin[i])
						case obs.ActionMask[i] == 0 && v != 0, v < 0, v > 1:
							t.Fatalf("step %d, node %s (mask %d): %s %v, want 0 off the mask and 0..1 on it", step, env.names[i], obs.ActionMask[i], gpu.PolicyScoreColumn(policy), v)
						}
						if v != 0 {
							nonzero++
						}
						if policy != own && v != builtin[i] {
							differ++
						}
					}
				}
				reply, err := env.Step(ctx, obs.BuiltinAction)
				if err != nil {
					t.Fatal(err)
				}
				if reply.Terminated {
					break
				}
				obs = reply.Observation
			}
			// Comparisons of zeros alone, or of a copy, would prove nothing.
			if nonzero < 100 || differ == 0 || cpuOnlyScored == 0 {
				t.Fatalf("%d nonzero scores, %d of other policies differing from builtin_score, %d of FragFit and FGD for pods without GPUs: want many, some and some",
					nonzero, differ, cpuOnlyScored)
			}
		})
	}
	if t.Failed() {
		return
	}
	for _, episode := range columns {
		for _, policy := range columns {
			got, want := column(first[episode], gpu.PolicyScoreColumn(policy)), column(first[policy], "builtin_score")
			if !slices.Equal(got, want) {
				t.Errorf("at the reset of the %s episode, %s %v; want the %s episode's builtin_score %v",
					episode, gpu.PolicyScoreColumn(policy), got, policy, want)
			}
		}
	}

	for _, tc := range []struct {
		columns []gpu.PolicyType
		want    string
	}{
		{[]gpu.PolicyType{"Tetris"}, `score column: unknown policy "Tetris": want one of`},
		{[]gpu.PolicyType{"FGD", "FGD"}, "score column FGD is asked for twice"},
	} {
		_, err := NewEnv(EnvOptions{Nodes: nodes, Pods: pods, Profile: defaultProfiles(t, "PairFit")[0], ScoreColumns: tc.columns})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("score columns %v: error %v, want one containing %q", tc.columns, err, tc.want)
		}
	}
}

// TestEnvironmentWithMigrations: with a migration budget, a pod that fits
// nowhere until pods move is observed with the one node its plan makes
// room on, and an episode of builtin actions is simulate's run: the same
// unallocated %, placed and failed pods. The run must move pods, or the
// test tests nothing.
func TestEnvironmentWithMigrations(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 24})
	profile := defaultProfiles(t, "PairFit")[0]
	profile.Migrations = MigrationBudget{Fraction: 0.05}
	env, err := NewEnv(EnvOptions{Nodes: nodes, Pods: pods, Profile: profile, Arrival: trace.ArrivalFGD, TieBreak: report.TieBreakRandom})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	runs, err := Simulate(context.Background(), Options{Nodes: nodes, Pods: pods, Profiles: []Profile{profile},
		Arrival: trace.ArrivalFGD, TieBreak: report.TieBreakRandom, Seeds: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	want := runs[0]
	if want.Migrations == nil || want.Migrations.Moves == 0 {
		t.Fatalf("simulate moved no pod (%v): the test tests nothing", want.Migrations)
	}
	info, _ := runBuiltin(t, env, 1)
	if got := info.UnallocatedPctAt_100; got == nil || want.UnallocatedPctAt100 == nil || *got != *want.UnallocatedPctAt100 ||
		int(info.PlacedPods) != want.Placed || int(info.FailedPods) != want.Failed {
		t.Errorf("environment unallocated %v%%, placed %d, failed %d; simulate %v%%, %d, %d",
			got, info.PlacedPods, info.FailedPods, want.UnallocatedPctAt100, want.Placed, want.Failed)
	}
}
