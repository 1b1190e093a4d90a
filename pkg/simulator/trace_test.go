package simulator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/pkg/trace"
)

// traceDir is the public Alibaba GPU trace, read in place.
var traceDir = filepath.Join("..", "..", "..", "shared", "traces", "alibaba-gpu-2023")

// loadTrace loads the trace's GPU cluster and a pod list, or skips the test
// when the trace is not beside the repository.
func loadTrace(t testing.TB, podList string) (Options, bool) {
	t.Helper()
	nodesFile := filepath.Join(traceDir, "openb_node_list_gpu_node.csv")
	if _, err := os.Stat(nodesFile); err != nil {
		t.Skipf("the Alibaba GPU trace is not at %s (it sits in ../shared beside the repository); skipping", traceDir)
		return Options{}, false
	}
	nodes, err := trace.LoadNodes(nodesFile)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := trace.LoadPods(filepath.Join(traceDir, podList))
	if err != nil {
		t.Fatal(err)
	}
	return Options{Nodes: nodes, Pods: pods, Arrival: trace.ArrivalFGD}, true
}

// BenchmarkTraceRun is one (policy, seed) run of the default trace: the
// simulator's speed target.
func BenchmarkTraceRun(b *testing.B) { benchTraceRun(b, "BestFitCPUGPU", false) }

// BenchmarkTraceRunDRA is BenchmarkTraceRun on the annotation path and on
// the DRA path, with the default policy choosing the devices: their ratio
// is the DRA path's cost (docs/benchmarks.md).
func BenchmarkTraceRunDRA(b *testing.B) {
	b.Run("annotations", func(b *testing.B) { benchTraceRun(b, "PairFit", false) })
	b.Run("dra", func(b *testing.B) { benchTraceRun(b, "PairFit", true) })
}

// benchTraceRun runs the default trace with the policy, seed 42, on the
// DRA path or the annotation path, and reports its scheduling and
// measuring time.
func benchTraceRun(b *testing.B, policy string, dra bool) {
	opts, _ := loadTrace(b, "openb_pod_list_default.csv")
	opts.Profiles, opts.Seeds, opts.DRA = defaultProfiles(b, policy), []int64{42}, dra
	for b.Loop() {
		runs, err := Simulate(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(runs[0].SchedulingSeconds, "sched-s")
		b.ReportMetric(runs[0].MetricsSeconds, "metrics-s")
	}
}
