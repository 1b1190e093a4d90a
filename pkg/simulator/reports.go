package simulator

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/floor"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// The simulation's side of its reports (pkg/simulator/report, which needs
// no scheduler): a report of the runs of Options, the shards of a sweep a
// process runs, and the commands that read --pods and --shard and merge.

// NewReport summarizes the runs of opts per profile, in the order the
// profiles ran, with the floors of the workload (workloadFloors).
func NewReport(opts Options, runs []report.Run, wall float64) *report.Report {
	return report.New(workloadOf(opts), profileNames(opts.Profiles), runs, workloadFloors(opts), wall)
}

// workloadOf is what a report says of opts' simulation.
func workloadOf(opts Options) report.Workload {
	return report.Workload{Name: opts.Workload, Arrival: opts.Arrival, TieBreak: opts.TieBreak, Nodes: opts.Nodes, Pods: opts.Pods}
}

// workloadFloors is the floors of opts' workload for each seed (floor.Of)
// under the FGD arrival process; none under replay, whose departures void
// every measure.
func workloadFloors(opts Options) []floor.Floor {
	if opts.Arrival == trace.ArrivalReplay {
		return nil
	}
	return floor.Of(opts.Nodes, opts.Pods, opts.Seeds)
}

func profileNames(profiles []Profile) []string {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.Name
	}
	return names
}

// parseShard reads the shard a process runs: --shard I/N, or --shards N
// with I from the environment variable ShardIndexEnv (read with getenv).
// ok is false when neither flag is given: the process runs the whole sweep.
func parseShard(shard string, shards int, getenv func(string) string) (s report.Shard, ok bool, err error) {
	switch {
	case shard != "" && shards != 0:
		return s, false, fmt.Errorf("--shard %s and --shards %d: give one, --shard I/N outside a Job or --shards N in an Indexed Job", shard, shards)
	case shard != "":
		i, n, found := strings.Cut(shard, "/")
		s.Index, err = strconv.Atoi(strings.TrimSpace(i))
		if err == nil {
			s.Count, err = strconv.Atoi(strings.TrimSpace(n))
		}
		if !found || err != nil || s.Count < 1 || s.Count > report.MaxShards || s.Index < 0 || s.Index >= s.Count {
			return report.Shard{}, false, fmt.Errorf("--shard %q: want I/N, shard I of N with 0 ≤ I < N ≤ %d, e.g. 0/8", shard, report.MaxShards)
		}
		return s, true, nil
	case shards != 0:
		if shards < 1 || shards > report.MaxShards {
			return s, false, fmt.Errorf("--shards %d: want a number of shards in 1..%d", shards, report.MaxShards)
		}
		env := getenv(report.ShardIndexEnv)
		if env == "" {
			return s, false, fmt.Errorf("--shards %d: the shard's index comes from %s, which is not set: run it in an Indexed Job, or give --shard I/%d", shards, report.ShardIndexEnv, shards)
		}
		i, err := strconv.Atoi(strings.TrimSpace(env))
		if err != nil || i < 0 || i >= shards {
			return s, false, fmt.Errorf("%s %q: want an integer in 0..%d (--shards %d)", report.ShardIndexEnv, env, shards-1, shards)
		}
		return report.Shard{Index: i, Count: shards}, true, nil
	}
	return s, false, nil
}

// runShard runs the shard's runs of the sweep, workload by workload (a
// workload with none of them is not even loaded), and writes them with the
// floors the shard owns to dir. A shard that fails writes its error instead,
// for Merge to report, and returns it, so that the Job retries the index.
func runShard(ctx context.Context, opts Options, workloads []workload, spec *report.SweepSpec, shard report.Shard, dir string, bar *progressBar, stdout io.Writer) error {
	start := time.Now()
	f := &report.ShardFile{Format: report.ShardFormat, Shard: shard.Index, Shards: shard.Count, Sweep: *spec, Workloads: []report.ShardWorkload{}}
	runs := 0
	err := func() error {
		for w, wl := range workloads {
			selects := func(p, s int) bool { return shard.Selects(spec.Combination(w, p, s)) }
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
			head := report.Head(workloadOf(o))
			o.Seeds = floorSeeds
			f.Workloads = append(f.Workloads, report.ShardWorkload{Workload: head.Workload, Nodes: head.Nodes, GPUs: head.GPUs, Pods: head.Pods,
				Runs: got, Floors: workloadFloors(o)})
			runs += len(got)
		}
		return nil
	}()
	f.WallSeconds = time.Since(start).Seconds()
	if err != nil {
		f.Error, f.Workloads = err.Error(), nil
	}
	path, werr := report.WriteShardFile(dir, f)
	if err != nil {
		return fmt.Errorf("shard %s failed: %w", shard, err)
	}
	if werr != nil {
		return werr
	}
	_, err = fmt.Fprintf(stdout, "shard %s: %d of the sweep's %d runs in %.1f s, written to %s\n", shard, runs, spec.Combinations(), f.WallSeconds, path)
	return err
}

// splitPodLists reads --pods: one or more files separated by commas, whose
// workload names (WorkloadName) must differ.
func splitPodLists(s string) ([]string, error) {
	var paths []string
	seen := map[string]string{}
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			return nil, fmt.Errorf("--pods %q: want one or more pod lists separated by commas, none empty", s)
		}
		name := report.WorkloadName(p)
		if other, ok := seen[name]; ok {
			return nil, fmt.Errorf("--pods: %s and %s are both named %q in reports: want pod lists whose file names differ", other, p, name)
		}
		seen[name] = p
		paths = append(paths, p)
	}
	return paths, nil
}

// mergeFlags are the options of `gpusched simulate merge`.
type mergeFlags struct {
	jsonOut, htmlOut string
	noTimings        bool
}

func newMergeCommand() *cobra.Command {
	var f mergeFlags
	cmd := &cobra.Command{
		Use:   "merge DIR...",
		Short: "Combine the shard files of a sweep into its report",
		Long: `merge reads the shard files (shard-I-of-N.json) that the shards of a sweep
wrote with --out, and prints and writes the report one process running the
whole sweep would: the same table, JSON and HTML. Every shard must be there
and have succeeded; otherwise merge names each missing, failed, corrupt or
foreign shard file and writes nothing.`,
		Example: `  gpusched simulate merge results/ --json sweep.json --html sweep.html`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, dirs []string) error {
			return runMerge(dirs, f, cmd.OutOrStdout())
		},
		SilenceUsage: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.jsonOut, "json", "", "write the full report as JSON to this file")
	fs.StringVar(&f.htmlOut, "html", "", "write a self-contained HTML report with charts to this file")
	fs.BoolVar(&f.noTimings, "no-timings", false, "report every wall time as 0, so that reports of the same sweep are equal byte for byte")
	return cmd
}

func runMerge(dirs []string, f mergeFlags, stdout io.Writer) error {
	sweep, err := report.Merge(dirs)
	if err != nil {
		return err
	}
	if f.noTimings {
		sweep.ClearTimings()
	}
	return writeSweep(sweep, stdout, f.jsonOut, f.htmlOut)
}
