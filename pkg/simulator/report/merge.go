package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/pkg/floor"
)

// IncompleteError is a sweep whose shards cannot be merged: each problem
// names a shard or a shard file and what is wrong with it.
type IncompleteError struct {
	Shards   int // the sweep's shards; 0 when no shard file could be read
	Problems []string
}

func (e *IncompleteError) Error() string {
	what := fmt.Sprintf("the sweep's %d shards cannot be merged", e.Shards)
	if e.Shards == 0 {
		what = "no shard file could be read"
	}
	return fmt.Sprintf("merge: %s:\n  %s", what, strings.Join(e.Problems, "\n  "))
}

// loadedShard is a shard file read from path.
type loadedShard struct {
	path string
	file ShardFile
}

// Merge reads every shard file (Shard.FileName) in dirs and assembles the
// sweep they are shards of: the reports, their runs in the order one process
// runs them, the summaries and floors computed by the same code. A sweep
// with any shard missing, failed, unreadable or from another sweep is
// returned as an *IncompleteError naming each.
func Merge(dirs []string) (*Sweep, error) {
	var paths []string
	for _, dir := range dirs {
		found, err := filepath.Glob(filepath.Join(dir, "shard-*.json"))
		if err == nil {
			_, err = os.Stat(dir)
		}
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("merge: no shard files (shard-I-of-N.json) in %s", strings.Join(dirs, ", "))
	}
	slices.Sort(paths)
	var problems []string
	var shards []loadedShard
	for _, path := range paths {
		s, err := readShardFile(path)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		shards = append(shards, s)
	}
	if len(shards) == 0 {
		return nil, &IncompleteError{Problems: problems}
	}
	refShard := majority(shards)
	ref := refShard.file
	byIndex := map[int]loadedShard{}
	for _, s := range shards {
		switch {
		case s.file.Shards != ref.Shards || !s.file.Sweep.equal(&ref.Sweep):
			problems = append(problems, fmt.Sprintf("%s: shard %d of %d of another sweep than %s (its workloads, policies, seeds, cluster, arrival, tie-break or shard count differ)",
				s.path, s.file.Shard, s.file.Shards, refShard.path))
		case byIndex[s.file.Shard].path != "":
			problems = append(problems, fmt.Sprintf("shard %d: two files, %s and %s", s.file.Shard, byIndex[s.file.Shard].path, s.path))
		case s.file.Error != "":
			byIndex[s.file.Shard] = s
			problems = append(problems, fmt.Sprintf("shard %d failed (%s): %s", s.file.Shard, s.path, s.file.Error))
		default:
			byIndex[s.file.Shard] = s
			if err := checkShardRuns(&s); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	for i := range ref.Shards {
		if _, ok := byIndex[i]; !ok && !namedIn(problems, i, ref.Shards) {
			problems = append(problems, fmt.Sprintf("shard %d missing: no %s in %s", i, Shard{i, ref.Shards}.FileName(), strings.Join(dirs, ", ")))
		}
	}
	if len(problems) > 0 {
		return nil, &IncompleteError{Shards: ref.Shards, Problems: problems}
	}
	return assemble(&ref.Sweep, byIndex), nil
}

// majority is the first shard of the sweep most shard files belong to: the
// one the others are checked against.
func majority(shards []loadedShard) loadedShard {
	key := func(s loadedShard) string {
		spec, _ := json.Marshal(s.file.Sweep)
		return fmt.Sprintf("%d %s", s.file.Shards, spec)
	}
	count := map[string]int{}
	best := shards[0]
	for _, s := range shards {
		k := key(s)
		count[k]++
		if count[k] > count[key(best)] {
			best = s
		}
	}
	for _, s := range shards { // the first file of that sweep
		if key(s) == key(best) {
			return s
		}
	}
	return best
}

// namedIn reports whether a problem already concerns shard i's file (a
// corrupt file, which gives no index of its own).
func namedIn(problems []string, i, n int) bool {
	name := Shard{i, n}.FileName()
	for _, p := range problems {
		if strings.Contains(p, name) {
			return true
		}
	}
	return false
}

// readShardFile reads and checks one shard file: its format, its shard
// numbers against its name, the sweep it belongs to.
func readShardFile(path string) (loadedShard, error) {
	s := loadedShard{path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("%s: unreadable: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.file); err != nil {
		return s, fmt.Errorf("%s: corrupt: not a shard file (%s JSON): %v", path, ShardFormat, err)
	}
	f := &s.file
	switch {
	case f.Format != ShardFormat:
		return s, fmt.Errorf("%s: corrupt: format %q, want %q", path, f.Format, ShardFormat)
	case f.Shards < 1 || f.Shard < 0 || f.Shard >= f.Shards:
		return s, fmt.Errorf("%s: corrupt: shard %d of %d, want 0 ≤ shard < shards", path, f.Shard, f.Shards)
	case filepath.Base(path) != Shard{f.Shard, f.Shards}.FileName():
		return s, fmt.Errorf("%s: corrupt: holds shard %d of %d, whose file is %s", path, f.Shard, f.Shards, Shard{f.Shard, f.Shards}.FileName())
	case len(f.Sweep.Workloads) == 0 || len(f.Sweep.Policies) == 0 || len(f.Sweep.Seeds) == 0:
		return s, fmt.Errorf("%s: corrupt: a sweep without workloads, policies or seeds", path)
	}
	return s, nil
}

// checkShardRuns checks that a shard holds exactly its runs of the sweep
// (Shard.Selects), each workload once, in the sweep's order.
func checkShardRuns(s *loadedShard) error {
	spec, shard := &s.file.Sweep, Shard{s.file.Shard, s.file.Shards}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: corrupt: %s", s.path, fmt.Sprintf(format, args...))
	}
	next := 0
	for _, sw := range s.file.Workloads {
		w := slices.Index(spec.Workloads, sw.Workload)
		if w < next {
			return bad("workload %q is not one of the sweep's %v, or out of order", sw.Workload, spec.Workloads)
		}
		next = w + 1
		var want []string
		for p, policy := range spec.Policies {
			for si, seed := range spec.Seeds {
				if shard.Selects(spec.Combination(w, p, si)) {
					want = append(want, fmt.Sprintf("%s/%d", policy, seed))
				}
			}
		}
		var got []string
		for _, r := range sw.Runs {
			got = append(got, fmt.Sprintf("%s/%d", r.Policy, r.Seed))
		}
		if !slices.Equal(got, want) {
			return bad("workload %s has runs (policy/seed) %v, want the shard's %v", sw.Workload, got, want)
		}
	}
	for w := range spec.Workloads {
		if !slices.ContainsFunc(s.file.Workloads, func(sw ShardWorkload) bool { return sw.Workload == spec.Workloads[w] }) {
			for c := spec.Combination(w, 0, 0); c < spec.Combination(w+1, 0, 0); c++ {
				if shard.Selects(c) {
					return bad("no runs of workload %s, which has runs in this shard", spec.Workloads[w])
				}
			}
		}
	}
	return nil
}

// assemble builds the sweep's reports from complete, checked shards: each
// workload's runs in policy then seed order, its floors in seed order.
func assemble(spec *SweepSpec, shards map[int]loadedShard) *Sweep {
	nw, np, ns := len(spec.Workloads), len(spec.Policies), len(spec.Seeds)
	reports := make([]*Report, nw)
	runs := make([][]Run, nw)
	floors := make([][]*floor.Floor, nw)
	for w, name := range spec.Workloads {
		reports[w] = &Report{Workload: name, Arrival: spec.Arrival, TieBreak: spec.TieBreak}
		runs[w], floors[w] = make([]Run, np*ns), make([]*floor.Floor, ns)
	}
	var wall float64
	for _, s := range shards {
		wall = max(wall, s.file.WallSeconds)
		shard := Shard{s.file.Shard, s.file.Shards}
		for _, sw := range s.file.Workloads {
			w := slices.Index(spec.Workloads, sw.Workload)
			r := reports[w]
			r.Nodes, r.GPUs, r.Pods = sw.Nodes, sw.GPUs, sw.Pods
			k := 0 // checkShardRuns: the runs are the shard's combinations, in order
			for p := range np {
				for si := range ns {
					if shard.Selects(spec.Combination(w, p, si)) {
						runs[w][p*ns+si] = sw.Runs[k]
						k++
					}
				}
			}
			for si, seed := range spec.Seeds {
				if !shard.Selects(spec.Combination(w, 0, si)) {
					continue
				}
				for i := range sw.Floors {
					if sw.Floors[i].Seed == seed {
						floors[w][si] = &sw.Floors[i]
					}
				}
			}
		}
	}
	for w, r := range reports {
		var kept []floor.Floor
		for _, fl := range floors[w] {
			if fl != nil {
				kept = append(kept, *fl)
			}
		}
		r.fill(spec.Policies, runs[w], kept)
	}
	return NewSweep(reports, wall)
}
