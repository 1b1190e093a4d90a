package report

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestShardsPartitionSweep: for any shard count, every combination of a
// sweep belongs to exactly one shard, and shards differ by at most one run.
func TestShardsPartitionSweep(t *testing.T) {
	spec := SweepSpec{Workloads: []string{"a", "b", "c"}, Policies: []string{"x", "y"}, Seeds: []int64{1, 2, 3, 4, 5}}
	total := spec.Combinations() // 3 × 2 × 5 = 30
	for n := 1; n <= total+2; n++ {
		counts := make([]int, n)
		for w := range spec.Workloads {
			for p := range spec.Policies {
				for s := range spec.Seeds {
					owners := 0
					for i := range n {
						if (Shard{i, n}).Selects(spec.Combination(w, p, s)) {
							owners++
							counts[i]++
						}
					}
					if owners != 1 {
						t.Fatalf("%d shards: combination (%d,%d,%d) belongs to %d shards, want 1", n, w, p, s, owners)
					}
				}
			}
		}
		lo, hi := total, 0
		for _, c := range counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Errorf("%d shards: %d to %d runs each, want a difference of at most 1", n, lo, hi)
		}
	}
}

// TestClearTimings: --no-timings leaves no wall or CPU time anywhere in a
// sweep's JSON — every field named *_seconds, including any added later —
// and changes nothing else.
func TestClearTimings(t *testing.T) {
	u := 7.5
	run := Run{Policy: "BestFit", Seed: 1, UnallocatedPctAt100: &u, Placed: 3, WallSeconds: 1.5, SchedulingSeconds: 1.2, MetricsSeconds: 0.1}
	r := &Report{Workload: "w", Nodes: 2}
	r.fill([]string{"BestFit"}, []Run{run, run}, nil)
	sweep := NewSweep([]*Report{r, {Workload: "v"}}, 9.25)
	before, _ := json.Marshal(sweep)
	if n := countSeconds(t, before, false); n == 0 {
		t.Fatalf("the fixture has no non-zero *_seconds field: %s", before)
	}
	sweep.ClearTimings()
	after, _ := json.Marshal(sweep)
	if n := countSeconds(t, after, false); n != 0 {
		t.Errorf("%d *_seconds fields left non-zero: %s", n, after)
	}
	if countSeconds(t, before, true) != countSeconds(t, after, true) || !strings.Contains(string(after), `"unallocated_pct_at_100":7.5`) {
		t.Errorf("ClearTimings changed more than times:\n%s\n%s", before, after)
	}
}

// countSeconds counts the *_seconds fields of a JSON document: all of them
// with all set, else those holding a non-zero number (or a Stat with one).
func countSeconds(t *testing.T, data []byte, all bool) int {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var nonZero func(any) bool
	nonZero = func(x any) bool {
		switch x := x.(type) {
		case float64:
			return x != 0
		case map[string]any:
			for _, y := range x {
				if nonZero(y) {
					return true
				}
			}
			return false
		}
		return true
	}
	n := 0
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if strings.HasSuffix(k, "_seconds") && (all || nonZero(x)) {
					n++
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return n
}
