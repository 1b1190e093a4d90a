//go:build perf

// Package perf measures gpusched's scheduling throughput with the upstream
// scheduler_perf harness: a real API server and etcd, the kube-scheduler with
// gpusched's plugins in its registry, and the workloads of
// performance-config.yaml. It needs an etcd binary on PATH (make bin/etcd)
// and runs with `make bench` (build tag "perf", so `go test ./...` skips it).
package perf

import (
	"fmt"
	"os"
	"testing"

	_ "k8s.io/component-base/logs/json/register"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme"
	"github.com/gpusched/gpusched/pkg/plugins"
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	m.Run()
}

func BenchmarkPerfScheduling(b *testing.B) {
	perf.RunBenchmarkPerfScheduling(b, "performance-config.yaml", "gpusched", plugins.Registry())
}
