package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// A ratio compares two test cases of one workload: Num's value over Den's,
// taken from runs of the same round.
type ratio struct{ Num, Den string }

func (r ratio) String() string { return r.Num + " / " + r.Den }

// parseRatios reads "A/B,C/D" into ratios; every name must be a test case
// of test/perf/performance-config.yaml (the runs fail otherwise).
func parseRatios(s string) ([]ratio, error) {
	var out []ratio
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, den, ok := strings.Cut(f, "/")
		num, den = strings.TrimSpace(num), strings.TrimSpace(den)
		if !ok || num == "" || den == "" || strings.Contains(den, "/") || num == den {
			return nil, fmt.Errorf("-ratios: %q is not NUMERATOR/DENOMINATOR of two different test cases", f)
		}
		out = append(out, ratio{num, den})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-ratios: no ratio given")
	}
	return out, nil
}

// casesOf is every test case the ratios name, each once, in the order first
// named.
func casesOf(rs []ratio) []string {
	var cases []string
	for _, r := range rs {
		for _, c := range []string{r.Num, r.Den} {
			if !slices.Contains(cases, c) {
				cases = append(cases, c)
			}
		}
	}
	return cases
}

// roundOrder is the order the test cases run in round r (from 0): the
// cases rotated by r, so over len(cases) rounds every case runs once in
// every position, and no case always runs first (on a cold page cache) or
// last (on a warm one).
func roundOrder(cases []string, r int) []string {
	k := r % len(cases)
	return append(slices.Clone(cases[k:]), cases[:k]...)
}

// run is what one benchmark run of a test case measured.
type run struct {
	PodsPerSec float64 // SchedulingThroughput, average over the measured pods
	HeapMiB    float64 // peak heap in use of the benchmark process
	// P50ms and P99ms are the framework's scheduling_attempt_duration of
	// scheduled pods: from the pod leaving the queue to its bind returning
	// (the scheduling cycle, then PreBind and Bind against the API server).
	P50ms, P99ms float64
	// CPUSec is the CPU the benchmark process spent placing the measured
	// pods (cpuprofile.go); NaN without a CPU profile.
	CPUSec float64
	// Load is the mean one-minute load average while the run lasted;
	// OtherCPU the cores busy with processes other than the benchmark's own
	// (from /proc/stat, less the benchmark's CPU time): both NaN where the
	// machine does not say.
	Load, OtherCPU float64
	Err            error
}

// dataItems is the part of scheduler_perf's data-items JSON that is read.
type dataItems struct {
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Unit   string             `json:"unit"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
}

// metricNames are the data items a run is read from.
const (
	throughputMetric = "SchedulingThroughput"
	heapMetric       = "heap_memory_usage"
	attemptMetric    = "scheduler_scheduling_attempt_duration_seconds"
)

// readRun reads the data items scheduler_perf wrote for one test case
// into run's measured fields; what is missing is NaN. scheduler_perf
// samples throughput once a second, so a run that places its pods in under
// a second (a smoke test's) has none.
func readRun(r io.Reader) (run, error) {
	var d dataItems
	if err := json.NewDecoder(r).Decode(&d); err != nil {
		return run{}, fmt.Errorf("data items: %w", err)
	}
	out := run{PodsPerSec: math.NaN(), HeapMiB: math.NaN(), P50ms: math.NaN(), P99ms: math.NaN()}
	for _, it := range d.DataItems {
		switch it.Labels["Metric"] {
		case throughputMetric:
			out.PodsPerSec = it.Data["Average"]
		case heapMetric:
			out.HeapMiB = it.Data["Max"]
		case attemptMetric:
			if it.Labels["result"] != "scheduled" {
				continue
			}
			scale := 1.0 // to milliseconds
			if it.Unit == "s" {
				scale = 1000
			}
			out.P50ms, out.P99ms = it.Data["Perc50"]*scale, it.Data["Perc99"]*scale
		}
	}
	return out, nil
}

// readRunDir reads the one data-items file a run left in dir, and its CPU
// profile when it has one.
func readRunDir(dir string) (run, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return run{}, err
	}
	if len(files) != 1 {
		return run{}, fmt.Errorf("%s: want one data-items file, found %d", dir, len(files))
	}
	f, err := os.Open(files[0])
	if err != nil {
		return run{}, err
	}
	defer f.Close()
	r, err := readRun(f)
	if err != nil {
		return r, err
	}
	r.CPUSec, err = readCPUProfileDir(dir)
	return r, err
}

// summary is a value's median and spread over rounds.
type summary struct {
	Median, Min, Max float64
	N                int
}

// summarize ignores NaNs; N is 0 when every value was NaN.
func summarize(vs []float64) summary {
	var xs []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	sort.Float64s(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return summary{Median: m, Min: xs[0], Max: xs[len(xs)-1], N: len(xs)}
}

// results holds every run: results[round][case].
type results []map[string]run

// ratioValues is r's value in each round, NaN in a round where either
// case failed; field picks the measurement.
func (res results) ratioValues(r ratio, field func(run) float64) []float64 {
	out := make([]float64, len(res))
	for i, round := range res {
		n, okN := round[r.Num]
		d, okD := round[r.Den]
		out[i] = math.NaN()
		if okN && okD && n.Err == nil && d.Err == nil && field(d) != 0 {
			out[i] = field(n) / field(d)
		}
	}
	return out
}

func (res results) caseValues(c string, field func(run) float64) []float64 {
	out := make([]float64, len(res))
	for i, round := range res {
		out[i] = math.NaN()
		if r, ok := round[c]; ok && r.Err == nil {
			out[i] = field(r)
		}
	}
	return out
}

func podsPerSec(r run) float64 { return r.PodsPerSec }
func heapMiB(r run) float64    { return r.HeapMiB }

// cpuRate is the inverse of the run's CPU: its ratios compare as pods/s
// does (above 1, the numerator takes less CPU for the same pods).
func cpuRate(r run) float64 { return 1 / r.CPUSec }

// report writes the tables: each ratio's median and spread over the rounds
// (throughput, then the CPU ratio, then peak heap), each test case's pods/s,
// CPU and latencies, and the load of the machine in each run.
func report(w io.Writer, workload string, cases []string, rs []ratio, res results) {
	fmt.Fprintf(w, "\n%s, %d rounds, the test cases interleaved (each round rotates their order)\n\n", workload, len(res))
	fmt.Fprintln(w, "| ratio | pods/s median | spread (min–max) | per round | CPU ratio median | spread (min–max) | per round | peak heap median |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		vs, cs := res.ratioValues(r, podsPerSec), res.ratioValues(r, cpuRate)
		s, c, h := summarize(vs), summarize(cs), summarize(res.ratioValues(r, heapMiB))
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f2(s.Median), spread(s, f2), joinF(vs, f2),
			f2(c.Median), spread(c, f2), joinF(cs, f2), f2(h.Median))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU ratio: the denominator's CPU seconds over the numerator's, for the same measured pods (from -perf-cpuprofile).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| test case | pods/s median | spread (min–max) | CPU s median | spread (min–max) | attempt p50 ms | attempt p99 ms | peak heap MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, c := range cases {
		s := summarize(res.caseValues(c, podsPerSec))
		cpu := summarize(res.caseValues(c, func(r run) float64 { return r.CPUSec }))
		p50 := summarize(res.caseValues(c, func(r run) float64 { return r.P50ms }))
		p99 := summarize(res.caseValues(c, func(r run) float64 { return r.P99ms }))
		h := summarize(res.caseValues(c, heapMiB))
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", c, f1(s.Median), spread(s, f1), f2(cpu.Median), spread(cpu, f2),
			f2(p50.Median), f2(p99.Median), f1(h.Median))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| round | test case | pods/s | load (1-min avg) | other processes' CPU (cores) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for i, round := range res {
		for _, c := range roundOrder(cases, i) {
			r, ok := round[c]
			switch {
			case !ok:
				continue
			case r.Err != nil:
				fmt.Fprintf(w, "| %d | %s | failed: %v | %s | %s |\n", i+1, c, r.Err, f2(r.Load), f2(r.OtherCPU))
			default:
				fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", i+1, c, f1(r.PodsPerSec), f2(r.Load), f2(r.OtherCPU))
			}
		}
	}
}

// spread is "min–max", or "–" when there is no value.
func spread(s summary, f func(float64) string) string {
	if s.N == 0 {
		return "–"
	}
	return f(s.Min) + "–" + f(s.Max)
}

func f1(v float64) string { return fmtF(v, "%.1f") }
func f2(v float64) string { return fmtF(v, "%.2f") }

func fmtF(v float64, format string) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func joinF(vs []float64, f func(float64) string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = f(v)
	}
	return strings.Join(parts, " ")
}
