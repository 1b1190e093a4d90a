package nri_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// BenchmarkNRICreateContainer: one CreateContainer as the runtime sees it,
// through the NRI adaptation, the ttrpc round trip over the unix socket and
// the agent's plugin, for a 2-GPU pod, an MPS share and a pod without GPUs.
// Besides ns/op it reports the 99th percentile of single calls (p99-ns).
func BenchmarkNRICreateContainer(b *testing.B) {
	cases := []struct {
		name        string
		annotations map[string]string
	}{
		{"whole-2", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2,3;milli=1000;memory=0;uuids=" + uuid(2) + "," + uuid(3)}},
		{"share-mps", map[string]string{gpu.AnnotationMilli: "250", gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=5;milli=250;memory=20480;uuids=" + uuid(5)}},
		{"no-gpu", nil},
	}
	r := startRuntime(b)
	startAgent(b, r, agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeCDI, MPSPipeDir: mpsDir}, eightGPUs(b))
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := pod("ml", "bench", c.annotations)
			var took []time.Duration
			i := 0
			for b.Loop() {
				i++
				ctr := container("c"+strconv.Itoa(i), "NVIDIA_VISIBLE_DEVICES=all", "PATH=/usr/local/bin:/usr/bin")
				start := time.Now()
				_, err := r.nri.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: p, Container: ctr})
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
