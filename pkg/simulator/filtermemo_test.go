package simulator

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestFilterMemoChangesNothing: handing back remembered Filter verdicts
// for nodes unchanged since gives the same runs, placement by placement and
// failure message by failure message, as filtering every node in every
// cycle: with pods only arriving (fgd) and with pods leaving too (replay),
// on the annotation path and on the DRA path, with the policy's devices and
// with first fit (where the memo keys a pod by its claims' specs and the
// run filters the node it commits to again).
func TestFilterMemoChangesNothing(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 40, Seed: 5})
	for _, c := range []struct {
		arrival       trace.Arrival
		dra, firstFit bool
	}{{trace.ArrivalFGD, false, false}, {trace.ArrivalReplay, false, false}, {trace.ArrivalFGD, true, false}, {trace.ArrivalReplay, true, false}, {trace.ArrivalFGD, true, true}} {
		arrival := c.arrival
		opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "FragFit", "BestFit"), Seeds: []int64{1, 2},
			Arrival: arrival, RecordPlacements: true, DRA: c.dra, DRAFirstFit: c.firstFit}
		remembered, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.NoFilterMemo = true
		filtered, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range filtered {
			a, b := remembered[i], filtered[i]
			if !reflect.DeepEqual(a.Placements, b.Placements) || !reflect.DeepEqual(a.FailureReasons, b.FailureReasons) {
				t.Errorf("%s, DRA %v (first fit %v), %s, seed %d: the memo changed the run: %d placed, %d failed, want %d, %d; reasons %v, want %v",
					arrival, c.dra, c.firstFit, b.Policy, b.Seed, a.Placed, a.Failed, b.Placed, b.Failed, a.FailureReasons, b.FailureReasons)
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
	m := newFilterMemo(filterNames(s.fw), nil, false)
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
