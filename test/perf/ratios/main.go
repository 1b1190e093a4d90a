// Command ratios measures how gpusched's scheduling throughput compares with
// the stock scheduler's in a way the noise of a shared machine cannot hide:
// it runs the scheduler_perf test cases that the ratios name, one process
// per run, interleaved (A B C, B C A, C A B, ... for -rounds rounds), and
// prints each ratio's median and spread over the rounds, each test case's
// pods/s, scheduling-attempt latency and peak heap, and the machine's load
// during every run. A ratio is taken within a round, so a slow minute of
// the machine moves both of its sides. Beside each ratio of pods/s it
// prints the ratio of the CPU the two test cases took for the same pods
// (cpuprofile.go): where the two agree, the benchmark's own work sets its
// pods/s, not waiting.
//
//	make bench-ratios                      # 5000 nodes, 5 rounds
//	make bench-ratios WORKLOAD=500Nodes ROUNDS=7
//	make bench-ratios-smoke                # 100 nodes, 2 rounds: CI's smoke test
//
// The binary is test/perf's test binary (go test -c -tags perf); etcd must
// be on PATH or beside it. Every run writes a CPU profile
// (-perf-cpuprofile, in -out; -cpu=false leaves it out). Arguments after
// the flags go to every run. It exits non-zero when a run failed or a
// ratio has no value in any round.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defaultRatios are the ratios of docs/benchmarks.md's headline: gpusched
// against the stock scheduler on the same whole-GPU pods, and each
// gpusched workload and the stock scheduler's whole-GPU pods against plain
// pods.
const defaultRatios = "GPUSchedWholeGPUPods/DefaultProfileWholeGPUPods," +
	"GPUSchedWholeGPUPods/DefaultProfilePlainPods," +
	"GPUSchedSharePods/DefaultProfilePlainPods," +
	"DefaultProfileWholeGPUPods/DefaultProfilePlainPods"

func main() { os.Exit(ratiosMain()) }

// ratiosMain is main, returning the exit code so that deferred clean-ups
// run.
func ratiosMain() int {
	binary := flag.String("binary", "bin/perf.test", "test/perf's test binary (go test -c -tags perf ./test/perf)")
	dir := flag.String("dir", "test/perf", "the directory the binary runs in (performance-config.yaml and its templates)")
	workload := flag.String("workload", "5000Nodes", "the workload of every test case (performance-config.yaml)")
	rounds := flag.Int("rounds", 5, "how many times each test case runs")
	ratiosFlag := flag.String("ratios", defaultRatios, "comma-separated NUMERATOR/DENOMINATOR test cases")
	out := flag.String("out", "", "where each run's log and data items go (default: a temporary directory, removed unless -keep)")
	keep := flag.Bool("keep", false, "keep -out after the report")
	timeout := flag.Duration("run-timeout", 30*time.Minute, "the longest one run may take")
	cpu := flag.Bool("cpu", true, "profile each run's CPU (-perf-cpuprofile) and report the CPU ratios")
	flag.Parse()
	extra := flag.Args()
	if *cpu {
		extra = append(extra, "-perf-cpuprofile")
	}

	rs, err := parseRatios(*ratiosFlag)
	if err != nil {
		return fail(err)
	}
	if *rounds < 1 {
		return fail(fmt.Errorf("-rounds: %d; want at least 1", *rounds))
	}
	bin, err := filepath.Abs(*binary)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fail(fmt.Errorf("-binary: %w (build it with: go test -c -tags perf -o bin/perf.test ./test/perf)", err))
	}
	outDir := *out
	if outDir == "" {
		if outDir, err = os.MkdirTemp("", "gpusched-ratios-"); err != nil {
			return fail(err)
		}
		if !*keep {
			defer os.RemoveAll(outDir)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cases := casesOf(rs)
	res := make(results, *rounds)
	failed := 0
	for i := range res {
		res[i] = map[string]run{}
		for _, c := range roundOrder(cases, i) {
			if ctx.Err() != nil {
				break
			}
			runDir := filepath.Join(outDir, fmt.Sprintf("round%d-%s", i+1, c))
			r := runCase(ctx, bin, *dir, runDir, c, *workload, *timeout, extra)
			if r.Err != nil {
				failed++
				fmt.Fprintf(os.Stderr, "round %d %s: %v (log: %s)\n", i+1, c, r.Err, filepath.Join(runDir, "log"))
			} else {
				fmt.Fprintf(os.Stderr, "round %d %s: %.1f pods/s, CPU %s s, load %s, other CPU %s\n", i+1, c, r.PodsPerSec, f2(r.CPUSec), f2(r.Load), f2(r.OtherCPU))
			}
			res[i][c] = r
		}
	}
	report(os.Stdout, *workload, cases, rs, res)
	if *keep || *out != "" {
		fmt.Fprintf(os.Stderr, "runs' logs and data items: %s\n", outDir)
	}
	code := 0
	if failed > 0 || ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "%d runs failed or did not run\n", failed)
		code = 1
	}
	for _, r := range rs {
		if summarize(res.ratioValues(r, podsPerSec)).N == 0 {
			fmt.Fprintf(os.Stderr, "ratio %s has no value in any round (a run too short for scheduler_perf to sample its throughput?)\n", r)
			code = 1
		}
	}
	return code
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "ratios:", err)
	return 2
}

// runCase runs one test case of the workload in its own process and reads
// what it measured; the process's output goes to runDir/log.
func runCase(ctx context.Context, bin, dir, runDir, testCase, workload string, timeout time.Duration, extra []string) run {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return run{Err: err, Load: math.NaN(), OtherCPU: math.NaN()}
	}
	log, err := os.Create(filepath.Join(runDir, "log"))
	if err != nil {
		return run{Err: err, Load: math.NaN(), OtherCPU: math.NaN()}
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append([]string{
		"-test.run", "^$",
		"-test.bench", fmt.Sprintf("^BenchmarkPerfScheduling$/^%s$/^%s$", testCase, workload),
		"-test.benchtime", "1x",
		"-test.timeout", timeout.String(),
		"-perf-scheduling-label-filter=",
		"-data-items-dir", runDir,
	}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	// etcd beside the binary (bin/etcd) comes before the rest of PATH.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	load := startLoadSampler()
	busy0, start := busyCPUSeconds(), time.Now()
	err = cmd.Run()
	wall, busy1 := time.Since(start).Seconds(), busyCPUSeconds()
	r := run{Load: load(), OtherCPU: math.NaN()}
	if cmd.ProcessState != nil && !math.IsNaN(busy0) && !math.IsNaN(busy1) && wall > 0 {
		own := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		r.OtherCPU = math.Max(0, (busy1-busy0-own)/wall)
	}
	if err != nil {
		r.Err = fmt.Errorf("%s: %w", testCase, err)
		return r
	}
	m, err := readRunDir(runDir)
	if err != nil {
		r.Err = err
		return r
	}
	m.Load, m.OtherCPU = r.Load, r.OtherCPU
	return m
}

// startLoadSampler reads the one-minute load average every second until
// the returned function is called, which returns their mean (NaN where
// /proc/loadavg cannot be read).
func startLoadSampler() func() float64 {
	var mu sync.Mutex
	var sum float64
	var n int
	done := make(chan struct{})
	sample := func() {
		if v := loadAvg(); !math.IsNaN(v) {
			mu.Lock()
			sum, n = sum+v, n+1
			mu.Unlock()
		}
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	sample()
	return func() float64 {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		if n == 0 {
			return math.NaN()
		}
		return sum / float64(n)
	}
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// clockTicks is USER_HZ, the unit of /proc/stat's times on every Linux
// architecture Go supports.
const clockTicks = 100

// busyCPUSeconds is the CPU time the whole machine has spent busy since it
// started (/proc/stat: user, nice, system, irq, softirq, steal), NaN where
// it cannot be read.
func busyCPUSeconds() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return math.NaN()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return math.NaN()
	}
	return parseBusy(sc.Text())
}

// parseBusy reads the "cpu" line of /proc/stat.
func parseBusy(line string) float64 {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return math.NaN()
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system _idle _iowait irq softirq steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return math.NaN()
		}
		busy += v
	}
	return busy / clockTicks
}
