package gpuview_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// bigCluster is n 8-GPU nodes, each GPU held: whole GPUs on even nodes,
// two 400-milli shares per GPU on odd ones, so that nothing fits a 1-GPU pod
// and every node has a fix to compute.
func bigCluster(n int) ([]*v1.Node, []*v1.Pod) {
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		nodes = append(nodes, gt.MakeGPUNode(name).GFD("A100", 8, 81920).Obj())
		for g := range 8 {
			if i%2 == 0 {
				pods = append(pods, bound(fmt.Sprintf("w-%d-%d", i, g), whole(name, g), int32(g)))
				continue
			}
			for k := range 2 {
				pods = append(pods, bound(fmt.Sprintf("s-%d-%d-%d", i, g, k), share(name, g, 400, 20480), 0))
			}
		}
	}
	return nodes, pods
}

// BenchmarkExplain is kubectl gpusched explain's computation at 5000 nodes
// (40,000 GPUs, 60,000 pods): the snapshot, then the answer for one pod.
func BenchmarkExplain(b *testing.B) {
	nodes, pods := bigCluster(5000)
	pod := gt.MakeGPUPod("p").Namespace("ml").GPUs(1).GPUMemory("40Gi").Obj()
	pods = append(pods, pod)
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			gpuview.Build(nodes, pods, gpuview.Options{})
		}
	})
	s := gpuview.Build(nodes, pods, gpuview.Options{})
	b.Run("explain", func(b *testing.B) {
		for b.Loop() {
			e := s.Explain(pod, pods, nil)
			if len(e.Fixes) == 0 {
				b.Fatal("no fix")
			}
		}
	})
}

var _ = gpu.MilliPerGPU
