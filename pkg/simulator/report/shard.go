package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpusched/gpusched/pkg/floor"
	"github.com/gpusched/gpusched/pkg/trace"
)

// ShardIndexEnv is the environment variable through which a Kubernetes
// Indexed Job gives each of its pods its completion index, 0..completions−1:
// with --shards N, the shard a process runs.
const ShardIndexEnv = "JOB_COMPLETION_INDEX"

// MaxShards bounds --shards: the file names hold five digits, and an Indexed
// Job with a per-index backoff limit has at most 100,000 completions.
const MaxShards = 100000

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

// ShardFormat marks a shard file; Merge reads no other format.
const ShardFormat = "gpusched-simulate-shard/v1"

// ShardFile is what one shard writes: the sweep it belongs to, and its runs
// of each workload it had runs of, or the error that stopped it.
type ShardFile struct {
	Format string    `json:"format"`
	Shard  int       `json:"shard"`
	Shards int       `json:"shards"`
	Sweep  SweepSpec `json:"sweep"`
	// Error is why the shard failed; a failed shard has no workloads.
	Error       string          `json:"error,omitempty"`
	Workloads   []ShardWorkload `json:"workloads"`
	WallSeconds float64         `json:"wall_seconds"`
}

// SweepSpec identifies a sweep: every shard of it must carry the same.
type SweepSpec struct {
	// Cluster names the node list (WorkloadName), or "synthetic".
	Cluster   string        `json:"cluster"`
	Workloads []string      `json:"workloads"`
	Policies  []string      `json:"policies"`
	Seeds     []int64       `json:"seeds"`
	Arrival   trace.Arrival `json:"arrival"`
	TieBreak  TieBreak      `json:"tie_break"`
}

func (a *SweepSpec) equal(b *SweepSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Combinations is the number of (workload, policy, seed) runs of the sweep.
func (a *SweepSpec) Combinations() int { return len(a.Workloads) * len(a.Policies) * len(a.Seeds) }

// Combination numbers run (w, p, s) of the sweep, as Shard describes.
func (a *SweepSpec) Combination(w, p, s int) int { return (w*len(a.Policies)+p)*len(a.Seeds) + s }

// ShardWorkload is a shard's part of one workload: the report's head, the
// shard's runs in profile then seed order, and the floors of the seeds
// whose run with the first policy is the shard's (each floor is computed by
// exactly one shard).
type ShardWorkload struct {
	Workload string        `json:"workload"`
	Nodes    int           `json:"nodes"`
	GPUs     int64         `json:"gpus"`
	Pods     int           `json:"pods"`
	Runs     []Run         `json:"runs"`
	Floors   []floor.Floor `json:"floors,omitempty"`
}

// WriteShardFile writes f into dir under its shard's FileName, through a
// temporary file renamed into place, so that a shard killed while writing
// leaves no partial file for Merge and a retried shard replaces its
// earlier attempt's file whole.
func WriteShardFile(dir string, f *ShardFile) (string, error) {
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
