package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/simulator/report"
)

// sweepArgs is the small sweep of the merge tests: 2 pod lists × 2
// policies × 3 seeds = 12 runs.
func sweepArgs(t *testing.T, dir string) []string {
	nodes, pods := writeSweepInputs(t, dir)
	return []string{"--nodes", nodes, "--pods", pods, "--policies", "BestFit,GpuPacking", "--seeds", "1..3", "--quiet"}
}

// runShards runs shards 0..n−1 of the sweep as separate processes, each
// with JOB_COMPLETION_INDEX set as an Indexed Job's controller sets it, and
// returns their output directory.
func runShards(t *testing.T, args []string, n int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "results")
	for i := range n {
		stdout, stderr, err := simulateProcess(t, []string{fmt.Sprintf("%s=%d", report.ShardIndexEnv, i)},
			append(args, "--shards", fmt.Sprint(n), "--out", out)...)
		if err != nil {
			t.Fatalf("shard %d: %v\n%s%s", i, err, stdout, stderr)
		}
		if want := fmt.Sprintf("shard %d/%d: ", i, n); !strings.HasPrefix(stdout, want) {
			t.Errorf("shard %d printed %q, want a line starting %q", i, stdout, want)
		}
	}
	return out
}

// TestShardedSweepMergesToOneProcess: a sweep run in 5 shards (12 runs do
// not divide evenly), each a separate process, merges into the table, JSON
// and HTML that one process writes, byte for byte, timings excluded.
func TestShardedSweepMergesToOneProcess(t *testing.T) {
	dir := t.TempDir()
	args := sweepArgs(t, dir)
	whole := filepath.Join(dir, "whole")
	table, stderr, err := simulateProcess(t, nil, append(args, "--no-timings", "--json", whole+".json", "--html", whole+".html")...)
	if err != nil {
		t.Fatalf("one process: %v\n%s", err, stderr)
	}

	out := runShards(t, args, 5)
	var runs int
	for i := range 5 {
		var f report.ShardFile
		if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(out, report.Shard{Index: i, Count: 5}.FileName()))), &f); err != nil {
			t.Fatal(err)
		}
		for _, w := range f.Workloads {
			runs += len(w.Runs)
		}
	}
	if runs != 12 {
		t.Errorf("the shards hold %d runs, want the sweep's 12", runs)
	}

	merged := filepath.Join(dir, "merged")
	mergedTable, stderr, err := simulateProcess(t, nil, "merge", out, "--no-timings", "--json", merged+".json", "--html", merged+".html")
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, stderr)
	}
	if mergedTable != table {
		t.Errorf("merged table differs from one process's:\n--- one process\n%s--- merged\n%s", table, mergedTable)
	}
	for _, ext := range []string{".json", ".html"} {
		if a, b := mustRead(t, whole+ext), mustRead(t, merged+ext); a != b {
			t.Errorf("merged %s report differs from one process's (%d and %d bytes)", ext, len(a), len(b))
		}
	}

	// The reports hold the whole sweep: a report per pod list, a summary per
	// policy over the 3 seeds.
	var sweep report.Sweep
	if err := json.Unmarshal([]byte(mustRead(t, merged+".json")), &sweep); err != nil {
		t.Fatal(err)
	}
	if len(sweep.Reports) != 2 || sweep.Reports[0].Workload != "pods-0" || sweep.Reports[1].Workload != "pods-1" {
		t.Fatalf("merged JSON has %d reports, want pods-0 and pods-1", len(sweep.Reports))
	}
	for _, r := range sweep.Reports {
		if len(r.Runs) != 6 || len(r.Summary) != 2 || r.Summary[0].Seeds != 3 || r.Summary[1].Seeds != 3 {
			t.Errorf("%s: %d runs, summaries %+v; want 6 runs and 3 seeds per policy", r.Workload, len(r.Runs), r.Summary)
		}
	}
	for _, w := range []string{"pods-0", "pods-1"} {
		if !regexp.MustCompile(`(?m)^` + w + `: 16 nodes, \d+ GPUs, 60 pods`).MatchString(mergedTable) {
			t.Errorf("table has no section for %s:\n%s", w, mergedTable)
		}
	}

	// Each workload's charts draw in its own section of the page.
	dom := renderHTML(t, merged+".html")
	if n := strings.Count(dom, `data-drawn="true"`); n != 8 {
		t.Errorf("%d charts drew, want 4 for each of the 2 workloads", n)
	}
	if m := regexp.MustCompile(`<body[^>]*data-error="([^"]*)"`).FindStringSubmatch(dom); m != nil {
		t.Errorf("the report's script failed: %s", m[1])
	}
}

// TestMergeNamesBrokenShards: a sweep whose shards are not all there and
// whole is not merged, and the error names every shard that is not.
func TestMergeNamesBrokenShards(t *testing.T) {
	args := sweepArgs(t, t.TempDir())
	good := runShards(t, args, 3)
	f0, f1, f2 := report.Shard{Index: 0, Count: 3}.FileName(), report.Shard{Index: 1, Count: 3}.FileName(), report.Shard{Index: 2, Count: 3}.FileName()

	// edit rewrites a shard file's JSON.
	edit := func(name string, change func(f map[string]any)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			var f map[string]any
			if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(dir, name))), &f); err != nil {
				t.Fatal(err)
			}
			change(f)
			data, _ := json.Marshal(f)
			mustWrite(t, filepath.Join(dir, name), string(data))
		}
	}
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, f1)) },
			[]string{"shard 1 missing: no " + f1}},
		{"two missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, f0)); os.Remove(filepath.Join(dir, f2)) },
			[]string{"shard 0 missing: no " + f0, "shard 2 missing: no " + f2}},
		{"truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, f2)
			mustWrite(t, p, mustRead(t, p)[:100])
		}, []string{f2 + ": corrupt: not a shard file"}},
		{"not JSON", func(t *testing.T, dir string) { mustWrite(t, filepath.Join(dir, f0), "PK\x03\x04") },
			[]string{f0 + ": corrupt: not a shard file"}},
		{"a run lost", edit(f1, func(f map[string]any) {
			w := f["workloads"].([]any)[0].(map[string]any)
			w["runs"] = w["runs"].([]any)[1:]
		}), []string{f1 + ": corrupt: workload pods-0 has runs (policy/seed)"}},
		{"index not its name", edit(f1, func(f map[string]any) { f["shard"] = 2 }),
			[]string{f1 + ": corrupt: holds shard 2 of 3, whose file is " + f2}},
		{"another sweep", edit(f2, func(f map[string]any) { f["sweep"].(map[string]any)["seeds"] = []int{1, 2} }),
			[]string{f2 + ": shard 2 of 3 of another sweep"}},
		// The sweep of most files is the one checked against, whichever file comes first.
		{"another sweep, first", edit(f0, func(f map[string]any) { f["sweep"].(map[string]any)["policies"] = []string{"BestFit"} }),
			[]string{f0 + ": shard 0 of 3 of another sweep than DIR/" + f1}},
		{"failed", edit(f0, func(f map[string]any) { f["error"] = "workload pods-1: out of memory"; f["workloads"] = nil }),
			[]string{"shard 0 failed (" + filepath.Join("DIR", f0) + "): workload pods-1: out of memory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, good, dir)
			tt.break_(t, dir)
			_, err := report.Merge([]string{dir})
			var inc *report.IncompleteError
			if !errors.As(err, &inc) {
				t.Fatalf("Merge error = %v, want an *IncompleteError", err)
			}
			msg := strings.ReplaceAll(err.Error(), dir, "DIR")
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q:\n%s", want, msg)
				}
			}
			if len(inc.Problems) != len(tt.want) {
				t.Errorf("%d problems, want %d:\n%s", len(inc.Problems), len(tt.want), msg)
			}
		})
	}

	// The command says the same and writes no report.
	dir := t.TempDir()
	copyDir(t, good, dir)
	os.Remove(filepath.Join(dir, f1))
	jsonOut := filepath.Join(dir, "sweep.json")
	_, stderr, err := simulateProcess(t, nil, "merge", dir, "--json", jsonOut)
	if err == nil || !strings.Contains(stderr, "shard 1 missing: no "+f1) {
		t.Errorf("merge with shard 1 missing: %v, stderr %q; want a failure naming shard 1", err, stderr)
	}
	if _, err := os.Stat(jsonOut); err == nil {
		t.Error("merge wrote a report of an incomplete sweep")
	}
	if _, err := report.Merge([]string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no shard files (shard-I-of-N.json) in") {
		t.Errorf("Merge of an empty directory: %v, want no shard files named", err)
	}
}

// TestFailedShardWritesItsError: a shard stopped by a bad input exits
// non-zero (the Job retries its index) and leaves its error for merge.
func TestFailedShardWritesItsError(t *testing.T) {
	dir := t.TempDir()
	args := sweepArgs(t, dir)
	bad := filepath.Join(dir, "pods-1.csv")
	mustWrite(t, bad, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1500\n")
	out := filepath.Join(dir, "results")
	for i := range 2 {
		_, stderr, err := simulateProcess(t, []string{fmt.Sprintf("%s=%d", report.ShardIndexEnv, i)}, append(args, "--shards", "2", "--out", out)...)
		if err == nil || !strings.Contains(stderr, "pods-1.csv:2:") {
			t.Errorf("shard %d: error %v, stderr %q; want a failure naming pods-1.csv:2", i, err, stderr)
		}
	}
	_, err := report.Merge([]string{out})
	for i := range 2 {
		if want := fmt.Sprintf("shard %d failed (%s): workload", i, filepath.Join(out, report.Shard{Index: i, Count: 2}.FileName())); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Merge error = %v, want %q", err, want)
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		mustWrite(t, filepath.Join(to, e.Name()), mustRead(t, filepath.Join(from, e.Name())))
	}
}
