package policyservice

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// TestExternalBreaker: closed until limit failures in a row; open for
// openFor; then one probe, which closes it on success and reopens it on
// failure; a success in between resets the count.
func TestExternalBreaker(t *testing.T) {
	b := breaker{limit: 3, openFor: time.Second}
	t0 := time.Unix(0, 0)
	steps := []struct {
		at      time.Duration
		allowed bool
		ok      bool // the call's outcome, when allowed
		open    bool // record's answer
	}{
		{0, true, false, false},
		{0, true, true, false}, // a success resets the count
		{0, true, false, false},
		{0, true, false, false},
		{0, true, false, true}, // third failure in a row: open until 1s
		{500 * time.Millisecond, false, false, true},
		{time.Second, true, false, true},                     // the probe fails: open until 2s
		{time.Second + time.Millisecond, false, false, true}, // no second probe
		{2 * time.Second, true, true, false},                 // the probe succeeds: closed
		{2 * time.Second, true, false, false},
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if got := b.allow(now); got != s.allowed {
			t.Fatalf("step %d at %v: allowed %v, want %v", i, s.at, got, s.allowed)
		}
		if !s.allowed {
			continue
		}
		if got := b.record(s.ok, now); got != s.open {
			t.Fatalf("step %d at %v: open %v after the call, want %v", i, s.at, got, s.open)
		}
	}
}

// TestExternalReplyChecks: a reply is used only with one finite score per
// node of the request: named, in any order, or as values in the request's
// order.
func TestExternalReplyChecks(t *testing.T) {
	names := []string{"a", "b"}
	score := func(pairs ...any) *pb.ScoreReply {
		r := &pb.ScoreReply{}
		for i := 0; i < len(pairs); i += 2 {
			r.Scores = append(r.Scores, &pb.NodeScore{Node: pairs[i].(string), Score: pairs[i+1].(float64)})
		}
		return r
	}
	tests := []struct {
		name  string
		reply *pb.ScoreReply
		want  []float64
		err   string
	}{
		{"in order", score("a", 1.0, "b", 2.0), []float64{1, 2}, ""},
		{"out of order", score("b", 2.0, "a", -1.0), []float64{-1, 2}, ""},
		{"too few", score("a", 1.0), nil, "1 scores for 2 nodes"},
		{"none", &pb.ScoreReply{}, nil, "0 scores for 2 nodes"},
		{"infinite", score("a", math.Inf(1), "b", 0.0), nil, `score +Inf for node "a": want a finite number`},
		{"unknown", score("a", 1.0, "c", 0.0), nil, `score for node "c", which is not one of the request's nodes`},
		{"twice", score("a", 1.0, "a", 0.0), nil, `two scores for node "a"`},
		{"values", &pb.ScoreReply{Values: []float64{3, -1}}, []float64{3, -1}, ""},
		{"too few values", &pb.ScoreReply{Values: []float64{3}}, nil, "1 values for 2 nodes"},
		{"an infinite value", &pb.ScoreReply{Values: []float64{0, math.Inf(-1)}}, nil, `value -Inf for node "b": want a finite number`},
		{"both forms", &pb.ScoreReply{Values: []float64{0, 1}, Scores: score("a", 1.0, "b", 0.0).Scores}, nil, "2 scores and 2 values: want one or the other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := checkReply(names, tt.reply)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) || got[0] != tt.want[0] || got[1] != tt.want[1] {
				t.Errorf("scores %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestExternalRescale: min-max onto 0..maxOut, rounded, the best alone at
// maxOut; all equal → maxOut.
func TestExternalRescale(t *testing.T) {
	// (v − lo)/(hi − lo) × 100 with lo −1, hi 3: −1 → 0, 0 → 25, 3 → 100,
	// 0.5 → 37.5 → 38, 2.999 → 99.975 → 100, capped at 99 below the best.
	if got := Rescale([]float64{-1, 0, 3, 0.5, 2.999}, 100); !slices.Equal(got, []int64{0, 25, 100, 38, 99}) {
		t.Errorf("Rescale %v, want [0 25 100 38 99]", got)
	}
	if got := Rescale([]float64{7, 7}, 100); got[0] != 100 || got[1] != 100 {
		t.Errorf("equal scores rescale to %v, want [100 100]", got)
	}
}
