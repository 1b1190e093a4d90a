package gang

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// BenchmarkFitEmpty is the PreFilter check of a gang on a cache miss: a
// gang of 64 pods of 8 GPUs on 500 and 5000 8-GPU nodes.
func BenchmarkFitEmpty(b *testing.B) {
	for _, n := range []int{500, 5000} {
		nodes := make([]*v1.Node, n)
		for i := range nodes {
			nodes[i] = gt.MakeGPUNode(fmt.Sprintf("n%d", i)).GFD(a100, 8, 81920).ResourceVersion("1").Obj()
		}
		demands := repeat(whole(8), 64)
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				if !FitEmpty(Cluster{Nodes: nodes}, demands, 64).Fits() {
					b.Fatal("does not fit")
				}
			}
		})
	}
}
