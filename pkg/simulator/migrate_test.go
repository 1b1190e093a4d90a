package simulator

import (
	"context"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

func TestParseMigrationBudget(t *testing.T) {
	tests := []struct {
		in      string
		want    MigrationBudget
		wantErr string
	}{
		{in: "2%", want: MigrationBudget{Fraction: 0.02}},
		{in: "0.5 %", want: MigrationBudget{Fraction: 0.005}},
		{in: "0.02", want: MigrationBudget{Fraction: 0.02}},
		{in: "100%", want: MigrationBudget{Fraction: 1}},
		{in: "30/h", want: MigrationBudget{PerHour: 30}},
		{in: "101%", wantErr: `migration budget "101%": not a fraction above 0 and at most 1`},
		{in: "0", wantErr: `migration budget "0": not a fraction above 0 and at most 1`},
		{in: "-1/h", wantErr: `migration budget "-1/h": not a positive number per hour`},
		{in: "two", wantErr: `migration budget "two": not a fraction`},
		{in: "NaN", wantErr: `migration budget "NaN": not a fraction`},
		{in: "Inf/h", wantErr: `migration budget "Inf/h": not a positive number per hour`},
	}
	for _, tc := range tests {
		got, err := ParseMigrationBudget(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `"30/h"`) {
				t.Errorf("%q: error %v, want one with %q and what is allowed", tc.in, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	// A budget names its profile as it was written.
	for _, in := range []string{"7%", "0.5%", "30/h"} {
		if b, err := ParseMigrationBudget(in); err != nil || b.String() != in {
			t.Errorf("%q reads back as %q (%v)", in, b.String(), err)
		}
	}
}

// TestMigrationsMakeRoom runs a hand-made case where one move places a pod
// that fits nowhere, and checks the plan and what the run reports.
//
// Two nodes of one T4 each, 8 CPUs, under Spread, in replay order:
//
//	t=0 a 500 milli → one node (the tie-break's)
//	t=1 b 500 milli → the other (Spread prefers the emptier GPU)
//	t=2 c 1 GPU     → fits nowhere: both GPUs hold 500
//
// With a budget of 50% of placed pods (1 move once a and b are placed), the
// planner moves the share of n0 (both one-move plans move 500 milli-GPU; n0
// is listed first) onto n1's GPU (500 free), and c takes n0's GPU: 1 plan,
// 1 move, 1000 milli-GPU placed by it, 1 move per GPU. Without the budget c
// fails.
func TestMigrationsMakeRoom(t *testing.T) {
	nodes := []*v1.Node{trace.NewNode("n0", 8000, 65536, 1, "T4"), trace.NewNode("n1", 8000, 65536, 1, "T4")}
	pods := []trace.Pod{
		{Pod: trace.NewPod("a", 1000, 1024, 1, 500, nil), Created: 0, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: trace.NewPod("b", 1000, 1024, 1, 500, nil), Created: 1, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: trace.NewPod("c", 1000, 1024, 1, 1000, nil), Created: 2, Deleted: trace.NeverDeleted, HasTimes: true},
	}
	profiles, err := withMigrations(defaultProfiles(t, "Spread"), "50%, 3600/h")
	if err != nil {
		t.Fatal(err)
	}
	if got := profileNames(profiles); !reflect.DeepEqual(got, []string{"Spread", "Spread +migrations 50%", "Spread +migrations 3600/h"}) {
		t.Fatalf("profiles %q", got)
	}
	runs, err := Simulate(context.Background(), Options{Nodes: nodes, Pods: pods, Profiles: profiles,
		Seeds: []int64{1}, Arrival: trace.ArrivalReplay, RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	if base := runs[0]; base.Failed != 1 || base.Migrations != nil {
		t.Errorf("without migrations: %d failed, migrations %+v; want c failed and no migrations", base.Failed, base.Migrations)
	}
	// 3600/h is one move per second of trace time: at t=2, 2 allowed.
	for _, run := range runs[1:] {
		want := report.MigrationStats{Budget: strings.TrimPrefix(run.Policy, "Spread +migrations "), Plans: 1, Moves: 1,
			MovedPct: 33.33, GPUMilliPlaced: 1000, PlacedByPlans: 1, MovesPerGPU: 1}
		if run.Failed != 0 || run.Placed != 3 || run.Migrations == nil || *run.Migrations != want {
			t.Errorf("%s: placed %d, failed %d, migrations %+v; want 3 placed and %+v", run.Policy, run.Placed, run.Failed, run.Migrations, want)
			continue
		}
		byPod := map[string]report.PodPlacement{}
		for _, p := range run.Placements {
			byPod[p.Pod] = p
		}
		moved := "a"
		if byPod["a"].Moves == 0 {
			moved = "b"
		}
		if byPod[moved].Moves != 1 || byPod[moved].Node != "n1" || byPod["c"].Node != "n0" {
			t.Errorf("%s: placements %+v; want the share of n0 moved to n1 and c on n0", run.Policy, run.Placements)
		}
	}
}

// TestMigrationsChangeNothingWhenAllFit checks that a budget changes
// nothing while every pod fits: the planner runs only for pods that fit
// nowhere.
func TestMigrationsChangeNothingWhenAllFit(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{})
	half := pods[:len(pods)/4] // a quarter of the workload: far below capacity
	profiles, err := withMigrations(defaultProfiles(t, "PairFit"), "5%")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := Simulate(context.Background(), Options{Nodes: nodes, Pods: half, Profiles: profiles,
		Seeds: []int64{3}, Arrival: trace.ArrivalReplay, RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	base, moved := runs[0], runs[1]
	if base.Failed != 0 {
		t.Fatalf("%d pods failed: the case needs a workload that fits", base.Failed)
	}
	if moved.Migrations == nil || moved.Migrations.Moves != 0 || !reflect.DeepEqual(base.Placements, moved.Placements) {
		t.Errorf("migrations %+v changed the placements of a workload that fits", moved.Migrations)
	}
}

// TestMigrationsLoseNothing runs the synthetic workload to past the
// cluster's capacity with a generous budget, episode by episode, and checks
// that plans are made, every moved pod lands where its plan says (none
// returned, none lost), and the measurements agree at the end: the
// allocated milli-GPU the curve reads equals the bound pods' assignments
// summed and the fragmentation tracker's views summed, no GPU holds more
// than its capacity, and every placed pod is bound.
func TestMigrationsLoseNothing(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{})
	profiles, err := withMigrations(defaultProfiles(t, "PairFit"), "5%")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Nodes: nodes, Pods: pods, Profiles: profiles[1:], Seeds: []int64{42}, Arrival: trace.ArrivalFGD}
	capacity, typical := trace.CapacityMilli(nodes), typicalPods(pods)
	r := &runner{opts: &opts, profile: profiles[1], seed: 42, capacity: capacity,
		typical: typical, parallelism: 1, tick: func() {}}
	e, err := r.newEpisode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	for {
		d, err := e.advance()
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			break
		}
		e.place(d.node)
	}
	out := e.result()
	m := out.Migrations
	if m == nil || m.Plans == 0 || m.Returned != 0 || m.Lost != 0 {
		t.Fatalf("migrations %+v: want plans made, none returned or lost", m)
	}
	var bound, tracked int64
	for uid := range e.sched.bound {
		if a, ok := gpu.AssignmentOf(e.sched.measured(uid)); ok {
			bound += a.Milli * int64(len(a.Devices))
		}
	}
	for name, tn := range e.frag.nodes {
		tracked += tn.view.UsedMilli()
		for g, u := range tn.view.Used {
			if u.Milli > gpu.MilliPerGPU {
				t.Errorf("GPU %d of %s holds %d milli-GPU", g, name, u.Milli)
			}
		}
	}
	if e.used != bound || tracked != bound {
		t.Errorf("allocated milli-GPU: the curve reads %d, the bound pods hold %d, the tracker counts %d", e.used, bound, tracked)
	}
	if len(e.sched.bound) != out.Placed {
		t.Errorf("%d pods bound, %d counted placed", len(e.sched.bound), out.Placed)
	}
}
