package simulator

import (
	"context"
	"reflect"
	"testing"
)

// TestFilterMemoChangesNothing: handing back remembered Filter verdicts
// for nodes unchanged since gives the same runs, placement by placement and
// failure message by failure message, as filtering every node in every
// cycle: with pods only arriving (fgd) and with pods leaving too (replay).
func TestFilterMemoChangesNothing(t *testing.T) {
	nodes, pods := Synthetic(SyntheticOptions{Nodes: 40, Seed: 5})
	for _, arrival := range []Arrival{ArrivalFGD, ArrivalReplay} {
		opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "FragFit", "BestFit"), Seeds: []int64{1, 2},
			Arrival: arrival, RecordPlacements: true}
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
				t.Errorf("%s, %s, seed %d: the memo changed the run: %d placed, %d failed, want %d, %d; reasons %v, want %v",
					arrival, b.Policy, b.Seed, a.Placed, a.Failed, b.Placed, b.Failed, a.FailureReasons, b.FailureReasons)
			}
		}
	}
}
