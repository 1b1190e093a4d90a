package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Sweep is the result of a simulation of one or more workloads (pod lists)
// on one cluster: a Report per workload, in the order the workloads were
// given. One process and a merge of shards (Merge) build it alike, through
// NewSweep, so that both write the same table, JSON and HTML.
type Sweep struct {
	Reports []*Report `json:"reports"`
	// WallSeconds is the wall time of the whole sweep: the command's in one
	// process, the longest shard's when merged (the shards run at once).
	WallSeconds float64 `json:"wall_seconds"`
}

// NewSweep assembles a sweep. With one workload the report's wall time is
// the sweep's; with several, each report's is the sum of its runs' wall
// times (the time that workload took, one run at a time), since the
// workloads of a sweep share its wall time.
func NewSweep(reports []*Report, wall float64) *Sweep {
	if len(reports) == 1 {
		reports[0].WallSeconds = wall
	} else {
		for _, r := range reports {
			var sum float64
			for _, run := range r.Runs {
				sum += run.WallSeconds
			}
			r.WallSeconds = Round2(sum)
		}
	}
	return &Sweep{Reports: reports, WallSeconds: wall}
}

// ClearTimings zeroes every wall and CPU time of the sweep (see
// Report.ClearTimings).
func (s *Sweep) ClearTimings() {
	s.WallSeconds = 0
	for _, r := range s.Reports {
		r.ClearTimings()
	}
}

// WriteTable prints each workload's table, then the sweep's wall time.
func (s *Sweep) WriteTable(w io.Writer) error {
	if len(s.Reports) == 1 {
		return s.Reports[0].WriteTable(w)
	}
	for i, r := range s.Reports {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := r.writeBody(w); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%d workloads, total wall time %.1f s\n", len(s.Reports), s.WallSeconds)
	return err
}

// WriteJSON writes the sweep to path: the Report itself for one workload
// (the format of a single simulation), else the Sweep.
func (s *Sweep) WriteJSON(path string) error {
	var v any = s
	if len(s.Reports) == 1 {
		v = s.Reports[0]
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WorkloadName is how a pod list is named in a sweep's reports and shard
// files: its file name without the extension, so that a sweep names its
// workloads alike wherever the traces are mounted.
func WorkloadName(path string) string {
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}
