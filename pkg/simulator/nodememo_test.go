package simulator

import (
	"context"
	"reflect"
	"slices"
	"testing"

	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestNodeMemoChangesNothing: handing back remembered Filter verdicts and
// raw scores for nodes unchanged since gives the same runs, placement by
// placement and failure message by failure message, as filtering and
// scoring every node in every cycle: with pods only arriving (fgd) and
// with pods leaving too (replay), with pods limited to GPU models (whose
// prices follow the fleet's free room, gpu.AnswerKey), on the annotation
// path and on the DRA path, with the policy's devices and with first fit
// (where the memo keys a pod by its claims' specs and the run filters the
// node it commits to again).
func TestNodeMemoChangesNothing(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 40, Seed: 5})
	for _, c := range []struct {
		arrival       trace.Arrival
		dra, firstFit bool
		limited       bool
	}{{trace.ArrivalFGD, false, false, false}, {trace.ArrivalReplay, false, false, false}, {trace.ArrivalFGD, false, false, true},
		{trace.ArrivalFGD, true, false, false}, {trace.ArrivalReplay, true, false, false}, {trace.ArrivalFGD, true, true, false}} {
		arrival := c.arrival
		pods := pods
		if c.limited {
			pods = limitToModels(t, pods, 3, "T4")
		}
		opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "FragFit", "BestFit", "PairFit"), Seeds: []int64{1, 2},
			Arrival: arrival, RecordPlacements: true, DRA: c.dra, DRAFirstFit: c.firstFit}
		remembered, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.NoMemo = true
		filtered, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range filtered {
			a, b := remembered[i], filtered[i]
			if !reflect.DeepEqual(a.Placements, b.Placements) || !reflect.DeepEqual(a.FailureReasons, b.FailureReasons) {
				t.Errorf("%s, DRA %v (first fit %v), limited %v, %s, seed %d: the memo changed the run: %d placed, %d failed, want %d, %d; reasons %v, want %v",
					arrival, c.dra, c.firstFit, c.limited, b.Policy, b.Seed, a.Placed, a.Failed, b.Placed, b.Failed, a.FailureReasons, b.FailureReasons)
			}
		}
	}
}

// TestFilterMemoServesDefaultProfile: with the built-in profile, a trace
// pod's cycle runs node-local Filter plugins only, so the memo serves it;
// a Filter plugin added to the profile and missing from nodeLocalFilters
// would turn the memo off without changing any result.
func TestFilterMemoServesDefaultProfile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 4, Seed: 5})
	registry, err := runRegistry(nil, &replayClock{}, typicalPods(pods))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newScheduler(ctx, registry, defaultProfiles(t, "PairFit")[0], nodes, 1, 1, report.TieBreakRandom, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := newNodeMemo(filterNames(s.fw), scoreNames(s.fw), nil, false, false)
	for _, tp := range pods[:20] {
		pod := tp.Pod
		state := framework.NewCycleState()
		if _, status, _ := s.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
			t.Fatalf("PreFilter of %s: %v", pod.Name, status)
		}
		if _, ok := m.shape(state, pod); !ok {
			t.Fatalf("the memo does not serve pod %s: Filter plugins that are not node-local run: %v (node-local: %v)", pod.Name, m.others, nodeLocalFilters)
		}
	}
}

// TestScoreMemoMatchesFramework: in every cycle, the scores the scheduler
// hands on (raw scores of unchanged nodes from the memo, normalized and
// weighed over all the feasible nodes) are exactly the framework's
// RunScorePlugins on the same cycle state, pod by pod as pods are placed:
// for PairFit with pods limited to a model, so that GPUPlacement's scores
// key changes during the run (the check that it does is below), for
// FragFit, for a profile whose other Score plugins are node-local too, and
// for one that filters only part of the 120 nodes per cycle; two
// goroutines score the nodes the memo does not answer. The memo
// must also serve: a test of a memo that never hands back a score proves
// nothing.
func TestScoreMemoMatchesFramework(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 120, Seed: 7})
	pods = limitToModels(t, pods, 4, "G2")
	withScorers := defaultProfiles(t, "PairFit")[0]
	withScorers.Name, withScorers.Profile = "PairFit with node-local scorers", withScorers.Profile.DeepCopy()
	for _, name := range []string{"NodeResourcesFit", "NodeResourcesBalancedAllocation", "TaintToleration", "NodeAffinity"} {
		withScorers.Profile.Plugins.PreScore.Enabled = append(withScorers.Profile.Plugins.PreScore.Enabled, schedconfig.Plugin{Name: name})
		withScorers.Profile.Plugins.Score.Enabled = append(withScorers.Profile.Plugins.Score.Enabled, schedconfig.Plugin{Name: name, Weight: 2})
	}
	partial := defaultProfiles(t, "PairFit")[0]
	half := int32(50)
	partial.Name, partial.Profile = "PairFit scoring half the nodes", partial.Profile.DeepCopy()
	partial.Profile.PercentageOfNodesToScore = &half
	for _, profile := range []Profile{defaultProfiles(t, "PairFit")[0], defaultProfiles(t, "FragFit")[0], withScorers, partial} {
		registry, err := runRegistry(nil, &replayClock{}, typicalPods(pods))
		if err != nil {
			t.Fatal(err)
		}
		s, err := newScheduler(ctx, registry, profile, nodes, 1, 2, report.TieBreakRandom, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.memo = newNodeMemo(filterNames(s.fw), scoreNames(s.fw), nil, false, false)
		if s.memo.scorers == nil {
			t.Fatalf("profile %s: the memo keeps no scores: its Score plugins %v are not all node-local (%v)", profile.Name, scoreNames(s.fw), nodeLocalScorers)
		}
		served, scored := 0, 0
		for _, tp := range pods {
			pod := tp.Pod
			d, _ := s.decide(ctx, pod)
			if d == nil {
				continue
			}
			if d.scores != nil {
				scored++
				want, status := s.fw.RunScorePlugins(ctx, d.state, pod, d.feasible)
				if !status.IsSuccess() {
					t.Fatalf("profile %s, pod %s: %v", profile.Name, pod.Name, status)
				}
				for i := range want {
					if got := d.scores[i]; got.Name != want[i].Name || got.TotalScore != want[i].TotalScore || !reflect.DeepEqual(got.Scores, want[i].Scores) {
						t.Fatalf("profile %s, pod %s, node %s: scores %v (total %d), the framework's %v (total %d)",
							profile.Name, pod.Name, want[i].Name, got.Scores, got.TotalScore, want[i].Scores, want[i].TotalScore)
					}
				}
			}
			if p := s.commit(ctx, d, d.node); p.node == "" {
				t.Fatalf("profile %s, pod %s: not bound: %s", profile.Name, pod.Name, p.reason)
			}
			served = s.memo.served
		}
		if scored == 0 || served == 0 {
			t.Fatalf("profile %s: %d cycles scored, %d raw scores handed back by the memo: want both above 0", profile.Name, scored, served)
		}
		if profile.Name == "PairFit" && s.memo.epoch.n < 2 {
			t.Errorf("profile %s: GPUPlacement's scores key never changed (%d epochs): the run does not test that a new key stops the memo", profile.Name, s.memo.epoch.n)
		}
	}
}

// limitToModels limits every nth GPU pod to the model.
func limitToModels(t *testing.T, pods []trace.Pod, nth int, model string) []trace.Pod {
	t.Helper()
	out := slices.Clone(pods)
	k := 0
	for i, tp := range out {
		d, err := gpu.DemandFromPod(tp.Pod)
		if err != nil {
			t.Fatal(err)
		}
		if d.IsZero() {
			continue
		}
		if k++; k%nth != 0 {
			continue
		}
		requests := tp.Pod.Spec.Containers[0].Resources.Requests
		out[i].Pod = trace.NewPod(tp.Pod.Name, requests.Cpu().MilliValue(), requests.Memory().Value()>>20, d.Count, d.Milli, []string{model})
	}
	return out
}
