package telemetry

import (
	"fmt"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// BenchmarkScoreNode rates one 8-GPU node with every dynamic signal sampled,
// for a one-GPU pod, with the default weights and a static part.
func BenchmarkScoreNode(b *testing.B) {
	devs := devices(a100, 8)
	node := &Node{}
	for i := range devs {
		node.GPUs = append(node.GPUs, gpuWith(i, devs[i].UUID, GPUUtil, float64(10*i), FBUsed, 20000.0, FBFree, 60000.0,
			EncUtil, 5.0, DecUtil, 7.0, PowerUsage, 250.0, DRAMActive, 0.3, XIDErrors, 0.0))
	}
	w := weights(Utilization, 3, Memory, 2, Video, 1, Power, 1, DRAM, 1, StaticBandwidth, 1)
	for _, k := range []int{1, 4} {
		b.Run(fmt.Sprintf("gpus-%d", k), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := ScoreNode(devs, node, k, 0, &w); r.Score <= 0 {
					b.Fatal(r)
				}
			}
		})
	}
	b.Run("health", func(b *testing.B) {
		inv, _ := gpu.NewInventory(devs)
		h := &Health{Snap: &Snapshot{Nodes: map[string]*Node{"n": node}}}
		b.ReportAllocs()
		for b.Loop() {
			if set, _ := h.Excluded("n", inv); set != 0 {
				b.Fatal(set)
			}
		}
	})
}
