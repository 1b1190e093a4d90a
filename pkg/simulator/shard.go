package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/floor"
	"github.com/gpusched/gpusched/pkg/trace"
)

// ShardIndexEnv is the environment variable through which a Kubernetes
// Indexed Job gives each of its pods its completion index, 0..completions−1:
// with --shards N, the shard a process runs.
const ShardIndexEnv = "JOB_COMPLETION_INDEX"

// maxShards bounds --shards: the file names hold five digits, and an Indexed
// Job with a per-index backoff limit has at most 100,000 completions.
const maxShards = 100000

// Shard is one part of a sweep, run by one process: Index in 0..Count−1.
//
// A sweep's runs are its (workload, policy, seed) combinations, numbered in
// the order one process runs them: workload by workload as given to --pods,
// then policy, then seed. Combination k belongs to shard k mod Count, so
// every shard gets runs of every workload and policy and, when Count does
// not divide the sweep, shards differ by at most one run.
type Shard struct{ Index, Count int }

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Selects reports whether combination k of the sweep is the shard's.
func (s Shard) Selects(k int) bool { return k%s.Count == s.Index }

// FileName is the file the shard writes its runs to in --out, and that
// Merge looks for.
func (s Shard) FileName() string {
	return fmt.Sprintf("shard-%05d-of-%05d.json", s.Index, s.Count)
}

// parseShard reads the shard a process runs: --shard I/N, or --shards N
// with I from the environment variable ShardIndexEnv (read with getenv).
// ok is false when neither flag is given: the process runs the whole sweep.
func parseShard(shard string, shards int, getenv func(string) string) (s Shard, ok bool, err error) {
	switch {
	case shard != "" && shards != 0:
		return s, false, fmt.Errorf("--shard %s and --shards %d: give one, --shard I/N outside a Job or --shards N in an Indexed Job", shard, shards)
	case shard != "":
		i, n, found := strings.Cut(shard, "/")
		s.Index, err = strconv.Atoi(strings.TrimSpace(i))
		if err == nil {
			s.Count, err = strconv.Atoi(strings.TrimSpace(n))
		}
		if !found || err != nil || s.Count < 1 || s.Count > maxShards || s.Index < 0 || s.Index >= s.Count {
			return Shard{}, false, fmt.Errorf("--shard %q: want I/N, shard I of N with 0 ≤ I < N ≤ %d, e.g. 0/8", shard, maxShards)
		}
		return s, true, nil
	case shards != 0:
		if shards < 1 || shards > maxShards {
			return s, false, fmt.Errorf("--shards %d: want a number of shards in 1..%d", shards, maxShards)
		}
		env := getenv(ShardIndexEnv)
		if env == "" {
			return s, false, fmt.Errorf("--shards %d: the shard's index comes from %s, which is not set: run it in an Indexed Job, or give --shard I/%d", shards, ShardIndexEnv, shards)
		}
		i, err := strconv.Atoi(strings.TrimSpace(env))
		if err != nil || i < 0 || i >= shards {
			return s, false, fmt.Errorf("%s %q: want an integer in 0..%d (--shards %d)", ShardIndexEnv, env, shards-1, shards)
		}
		return Shard{Index: i, Count: shards}, true, nil
	}
	return s, false, nil
}

// shardFormat marks a shard file; Merge reads no other format.
const shardFormat = "gpusched-simulate-shard/v1"

// shardFile is what one shard writes: the sweep it belongs to, and its runs
// of each workload it had runs of, or the error that stopped it.
type shardFile struct {
	Format string    `json:"format"`
	Shard  int       `json:"shard"`
	Shards int       `json:"shards"`
	Sweep  sweepSpec `json:"sweep"`
	// Error is why the shard failed; a failed shard has no workloads.
	Error       string          `json:"error,omitempty"`
	Workloads   []shardWorkload `json:"workloads"`
	WallSeconds float64         `json:"wall_seconds"`
}

// sweepSpec identifies a sweep: every shard of it must carry the same.
type sweepSpec struct {
	// Cluster names the node list (WorkloadName), or "synthetic".
	Cluster   string        `json:"cluster"`
	Workloads []string      `json:"workloads"`
	Policies  []string      `json:"policies"`
	Seeds     []int64       `json:"seeds"`
	Arrival   trace.Arrival `json:"arrival"`
	TieBreak  TieBreak      `json:"tie_break"`
}

func (a *sweepSpec) equal(b *sweepSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// combinations is the number of (workload, policy, seed) runs of the sweep.
func (a *sweepSpec) combinations() int { return len(a.Workloads) * len(a.Policies) * len(a.Seeds) }

// combination numbers run (w, p, s) of the sweep, as Shard describes.
func (a *sweepSpec) combination(w, p, s int) int { return (w*len(a.Policies)+p)*len(a.Seeds) + s }

// shardWorkload is a shard's part of one workload: the report's head, the
// shard's runs in profile then seed order, and the floors of the seeds
// whose run with the first policy is the shard's (each floor is computed by
// exactly one shard).
type shardWorkload struct {
	Workload string        `json:"workload"`
	Nodes    int           `json:"nodes"`
	GPUs     int64         `json:"gpus"`
	Pods     int           `json:"pods"`
	Runs     []Run         `json:"runs"`
	Floors   []floor.Floor `json:"floors,omitempty"`
}

// writeShardFile writes f into dir under its shard's FileName, through a
// temporary file renamed into place, so that a shard killed while writing
// leaves no partial file for Merge and a retried shard replaces its
// earlier attempt's file whole.
func writeShardFile(dir string, f *shardFile) (string, error) {
	data, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--out %s: %w", dir, err)
	}
	path := filepath.Join(dir, Shard{f.Shard, f.Shards}.FileName())
	tmp, err := os.CreateTemp(dir, ".shard-*.tmp")
	if err != nil {
		return "", fmt.Errorf("--out %s: %w", dir, err)
	}
	// Readable by whoever merges, as os.WriteFile would leave it.
	err = tmp.Chmod(0o644)
	if err == nil {
		_, err = tmp.Write(append(data, '\n'))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// runShard runs the shard's runs of the sweep, workload by workload (a
// workload with none of them is not even loaded), and writes them with the
// floors the shard owns to dir. A shard that fails writes its error instead,
// for Merge to report, and returns it, so that the Job retries the index.
func runShard(ctx context.Context, opts Options, workloads []workload, spec *sweepSpec, shard Shard, dir string, bar *progressBar, stdout io.Writer) error {
	start := time.Now()
	f := &shardFile{Format: shardFormat, Shard: shard.Index, Shards: shard.Count, Sweep: *spec, Workloads: []shardWorkload{}}
	runs := 0
	err := func() error {
		for w, wl := range workloads {
			selects := func(p, s int) bool { return shard.Selects(spec.combination(w, p, s)) }
			var floorSeeds []int64
			has := false
			for s, seed := range opts.Seeds {
				if selects(0, s) {
					floorSeeds = append(floorSeeds, seed)
				}
				for p := range opts.Profiles {
					has = has || selects(p, s)
				}
			}
			if !has {
				continue
			}
			o := opts
			var err error
			if o.Workload, o.Pods, err = wl.load(); err != nil {
				return fmt.Errorf("workload %s: %w", wl.name, err)
			}
			o.Select = selects
			o.Progress = bar.start(o.Workload, true)
			got, err := Simulate(ctx, o)
			bar.finish()
			if err != nil {
				return fmt.Errorf("workload %s: %w", o.Workload, err)
			}
			head := reportHead(o)
			o.Seeds = floorSeeds
			f.Workloads = append(f.Workloads, shardWorkload{Workload: head.Workload, Nodes: head.Nodes, GPUs: head.GPUs, Pods: head.Pods,
				Runs: got, Floors: workloadFloors(o)})
			runs += len(got)
		}
		return nil
	}()
	f.WallSeconds = time.Since(start).Seconds()
	if err != nil {
		f.Error, f.Workloads = err.Error(), nil
	}
	path, werr := writeShardFile(dir, f)
	if err != nil {
		return fmt.Errorf("shard %s failed: %w", shard, err)
	}
	if werr != nil {
		return werr
	}
	_, err = fmt.Fprintf(stdout, "shard %s: %d of the sweep's %d runs in %.1f s, written to %s\n", shard, runs, spec.combinations(), f.WallSeconds, path)
	return err
}
