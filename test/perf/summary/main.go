// Command summary turns the output of the scheduler_perf benchmarks
// (make bench-scheduler) into the table of docs/benchmarks.md: per node count,
// each test case's scheduling throughput and peak heap, and their ratios to
// the reference test case of the same run (referenceOf).
//
//	make bench-scheduler | tee perf.log; go run ./test/perf/summary < perf.log
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// reference is the test case every other is compared with, unless it has
// its own reference (referenceOf).
const reference = "DefaultProfilePlainPods"

// referenceOf is the test case that c is compared with among cases: for
// GPUSched<X>, DefaultProfile<X> when the run has it (the same workload
// under the default profile, e.g. DefaultProfileDRAClaimTemplates), else
// reference.
func referenceOf(c string, cases map[string]result) string {
	if rest, ok := strings.CutPrefix(c, "GPUSched"); ok {
		if own := "DefaultProfile" + rest; cases[own] != nil {
			return own
		}
	}
	return reference
}

// result is a test case's metrics, by unit ("SchedulingThroughput/Average"),
// averaged over the runs of the input (go test -count).
type result map[string]float64

// benchLine matches "BenchmarkPerfScheduling/<case>/<workload>-<procs> <iterations> <value> <unit> ...".
var benchLine = regexp.MustCompile(`^BenchmarkPerfScheduling/([^/\s]+)/([^/\s]+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (map[string]map[string]result, error) {
	out := map[string]map[string]result{} // workload → case → metrics
	runs := map[string]float64{}          // workload/case → runs summed so far
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		res := result{}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("value %q in %q: %w", fields[i], sc.Text(), err)
			}
			res[fields[i+1]] = v
		}
		if len(res) == 0 {
			continue // a repeated run's header line without metrics
		}
		if out[m[2]] == nil {
			out[m[2]] = map[string]result{}
		}
		key := m[2] + "/" + m[1]
		n := runs[key]
		sum := out[m[2]][m[1]]
		if sum == nil {
			sum = result{}
		}
		for unit, v := range res {
			sum[unit] = (sum[unit]*n + v) / (n + 1) // running mean
		}
		out[m[2]][m[1]], runs[key] = sum, n+1
	}
	return out, sc.Err()
}

func main() {
	runs, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "no BenchmarkPerfScheduling results on standard input")
		os.Exit(1)
	}
	workloads := make([]string, 0, len(runs))
	for w := range runs {
		workloads = append(workloads, w)
	}
	sort.Strings(workloads)
	fmt.Println("| nodes | test case | pods/s (avg) | reference | × reference | peak heap MiB | × reference |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, w := range workloads {
		cases := make([]string, 0, len(runs[w]))
		for c := range runs[w] {
			cases = append(cases, c)
		}
		sort.Slice(cases, func(i, j int) bool { return cases[i] == reference || cases[j] != reference && cases[i] < cases[j] })
		for _, c := range cases {
			r, refName := runs[w][c], referenceOf(c, runs[w])
			ref := runs[w][refName]
			if c == refName || ref == nil {
				refName = "–"
			}
			tput, heap := r["SchedulingThroughput/Average"], r["heap_memory_usage/Max"]
			fmt.Printf("| %s | %s | %.1f | %s | %s | %.0f | %s |\n", w, c, tput, refName, ratio(tput, ref["SchedulingThroughput/Average"]), heap, ratio(heap, ref["heap_memory_usage/Max"]))
		}
	}
}

func ratio(v, ref float64) string {
	if ref == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/ref)
}
