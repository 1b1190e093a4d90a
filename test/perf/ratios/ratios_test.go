package main

import (
	"bytes"
	"errors"
	"math"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseRatios(t *testing.T) {
	rs, err := parseRatios(" A/B, C/A ,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []ratio{{"A", "B"}, {"C", "A"}}; !slices.Equal(rs, want) {
		t.Errorf("parseRatios = %v, want %v", rs, want)
	}
	if got, want := casesOf(rs), []string{"A", "B", "C"}; !slices.Equal(got, want) {
		t.Errorf("casesOf = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "A", "A/", "/B", "A/B/C", "A/A"} {
		if _, err := parseRatios(bad); err == nil || !strings.Contains(err.Error(), "-ratios") {
			t.Errorf("parseRatios(%q) = %v, want an error naming -ratios", bad, err)
		}
	}
}

// Over len(cases) rounds every case runs once in every position.
func TestRoundOrderRotates(t *testing.T) {
	cases := []string{"A", "B", "C", "D"}
	seen := map[string]map[int]bool{}
	for r := range len(cases) {
		order := roundOrder(cases, r)
		if len(order) != len(cases) {
			t.Fatalf("round %d: order %v", r, order)
		}
		for pos, c := range order {
			if seen[c] == nil {
				seen[c] = map[int]bool{}
			}
			seen[c][pos] = true
		}
	}
	for _, c := range cases {
		if len(seen[c]) != len(cases) {
			t.Errorf("case %s ran in positions %v, want all %d", c, seen[c], len(cases))
		}
	}
	if got := roundOrder(cases, 5); !slices.Equal(got, []string{"B", "C", "D", "A"}) {
		t.Errorf("round 5 = %v, want B C D A", got)
	}
}

// A data-items file as scheduler_perf writes it (shortened).
const dataItemsJSON = `{"version":"v1","dataItems":[
 {"data":{"Average":287.5,"Perc50":290,"Perc90":310},"unit":"pods/s","labels":{"Metric":"SchedulingThroughput","Name":"x"}},
 {"data":{"Max":812.3,"Average":700},"unit":"MB","labels":{"Metric":"heap_memory_usage"}},
 {"data":{"Perc50":9.5,"Perc99":40},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","result":"unschedulable"}},
 {"data":{"Perc50":2.5,"Perc99":12.25},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","result":"scheduled"}}
]}`

func TestReadRun(t *testing.T) {
	r, err := readRun(strings.NewReader(dataItemsJSON))
	if err != nil {
		t.Fatal(err)
	}
	// The scheduled pods' latency, not the unschedulable ones'.
	if r.PodsPerSec != 287.5 || r.HeapMiB != 812.3 || r.P50ms != 2.5 || r.P99ms != 12.25 {
		t.Errorf("readRun = %+v", r)
	}
	// Seconds are turned into milliseconds.
	r, err = readRun(strings.NewReader(`{"dataItems":[{"data":{"Average":1},"labels":{"Metric":"SchedulingThroughput"}},
	 {"data":{"Perc50":0.002,"Perc99":0.01},"unit":"s","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","result":"scheduled"}}]}`))
	if err != nil || r.P50ms != 2 || r.P99ms != 10 || !math.IsNaN(r.HeapMiB) {
		t.Errorf("readRun in seconds = %+v, %v; want p50 2 ms, p99 10 ms, no heap", r, err)
	}
	// A run too short for scheduler_perf to sample throughput: its item has
	// no data and no Metric label.
	r, err = readRun(strings.NewReader(`{"dataItems":[{"data":null,"unit":"","labels":{"Metric":"not applicable","Name":"x"}}]}`))
	if err != nil || !math.IsNaN(r.PodsPerSec) {
		t.Errorf("no throughput sampled: %+v, %v; want NaN pods/s and no error", r, err)
	}
	if _, err := readRun(strings.NewReader(`{`)); err == nil {
		t.Error("a truncated file was read without error")
	}
}

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		in            []float64
		med, min, max float64
		n             int
	}{
		{[]float64{3, 1, 2}, 2, 1, 3, 3},
		{[]float64{4, 1, 2, 3}, 2.5, 1, 4, 4}, // (2+3)/2
		{[]float64{nan, 5, 1}, 3, 1, 5, 2},    // NaN (a failed round) is left out: (1+5)/2
	} {
		s := summarize(tc.in)
		if s.Median != tc.med || s.Min != tc.min || s.Max != tc.max || s.N != tc.n {
			t.Errorf("summarize(%v) = %+v", tc.in, s)
		}
	}
	if s := summarize([]float64{nan}); s.N != 0 || !math.IsNaN(s.Median) {
		t.Errorf("summarize(NaN) = %+v, want no value", s)
	}
}

// A ratio pairs the two cases of the same round, and a round where either
// failed gives no value.
func TestRatioValuesPairRounds(t *testing.T) {
	res := results{
		{"A": {PodsPerSec: 300}, "B": {PodsPerSec: 200}},
		{"A": {PodsPerSec: 100}, "B": {PodsPerSec: 100}},
		{"A": {PodsPerSec: 100}, "B": {Err: errors.New("failed")}},
	}
	got := res.ratioValues(ratio{"A", "B"}, podsPerSec)
	if got[0] != 1.5 || got[1] != 1 || !math.IsNaN(got[2]) {
		t.Errorf("ratioValues = %v, want [1.5 1 NaN]", got)
	}
	// The CPU ratio is B's CPU over A's: 10/8 = 1.25 and 12/12 = 1 (NaN
	// where a run has no profile); A's CPU, median of 8, 12 and 9: 9.
	res[0]["A"], res[0]["B"] = run{PodsPerSec: 300, CPUSec: 8}, run{PodsPerSec: 200, CPUSec: 10}
	res[1]["A"], res[1]["B"] = run{PodsPerSec: 100, CPUSec: 12}, run{PodsPerSec: 100, CPUSec: 12}
	res[2]["A"] = run{PodsPerSec: 100, CPUSec: 9}
	var sb strings.Builder
	report(&sb, "10Nodes", []string{"A", "B"}, []ratio{{"A", "B"}}, res)
	out := sb.String()
	// Median of 1.5 and 1 is 1.25; pods/s of A: median of 300, 100, 100.
	for _, want := range []string{"| A / B | 1.25 | 1.00–1.50 | 1.50 1.00 – | 1.12 | 1.00–1.25 | 1.25 1.00 – |",
		"| A | 100.0 | 100.0–300.0 | 9.00 | 8.00–12.00 |", "| 3 | B | failed: failed |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestParseBusy(t *testing.T) {
	// user 100, nice 10, system 50, idle 1000, iowait 20, irq 5, softirq 5, steal 10:
	// busy = 100+10+50+5+5+10 = 180 ticks = 1.8 s.
	if got := parseBusy("cpu  100 10 50 1000 20 5 5 10 0 0"); got != 1.8 {
		t.Errorf("parseBusy = %v, want 1.8", got)
	}
	if got := parseBusy("cpu0 1 2"); !math.IsNaN(got) {
		t.Errorf("parseBusy of a short line = %v, want NaN", got)
	}
}

// A CPU profile as the runtime writes it reads as the CPU the process
// spent while it ran: within a third of what the kernel counted for the
// process over the same time (the profile samples at 100 Hz).
func TestReadCPUProfile(t *testing.T) {
	var buf bytes.Buffer
	before := processCPU(t)
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Fatal(err)
	}
	deadline, x := time.Now().Add(500*time.Millisecond), 0.0
	for time.Now().Before(deadline) {
		x += math.Sqrt(x + 1)
	}
	pprof.StopCPUProfile()
	spent := processCPU(t) - before
	got, err := readCPUProfile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got < spent*2/3 || got > spent*4/3 {
		t.Errorf("the profile holds %.3f s of CPU; the process spent %.3f s (%v)", got, spent, x > 0)
	}
	if _, err := readCPUProfile(strings.NewReader("not gzip")); err == nil {
		t.Error("a file that is not a profile was read without error")
	}
}

// processCPU is the CPU seconds this process has spent, user and system.
func processCPU(t *testing.T) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
