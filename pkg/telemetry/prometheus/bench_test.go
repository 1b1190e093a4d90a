package prometheus

import (
	"fmt"
	"testing"

	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// BenchmarkParse turns one refresh's gauge query result into a snapshot:
// 5000 nodes of 8 GPUs, 8 signals each (320,000 samples), as Prometheus
// returns them decoded.
func BenchmarkParse(b *testing.B) {
	signals := []telemetry.Signal{telemetry.GPUUtil, telemetry.FBUsed, telemetry.FBFree, telemetry.PowerUsage,
		telemetry.EncUtil, telemetry.DecUtil, telemetry.DRAMActive, telemetry.RowRemapFailure}
	var vec model.Vector
	for n := range 5000 {
		for g := range 8 {
			for _, s := range signals {
				vec = append(vec, sample(float64(g), "__name__", s.Metric(), "Hostname", fmt.Sprintf("node-%d", n),
					"gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%d-%d", n, g), "modelName", "NVIDIA A100-SXM4-80GB"))
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		bl := newBuilder(DefaultNodeLabels)
		bl.add(klog.Background(), vec, nil)
		if len(bl.nodes) != 5000 {
			b.Fatal(len(bl.nodes))
		}
	}
}
