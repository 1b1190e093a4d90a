package gpuview_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// TestPlanNodesHost: the planner sees each node's host as the scheduler's
// plugin does (gpu.Maxima, gpu.Free): the cluster's largest CPU counts a
// node without GPUs, which the snapshot does not list, and memory asked
// for in parts of a MiB is rounded once, on the node's total.
func TestPlanNodesHost(t *testing.T) {
	a100 := "NVIDIA-A100-SXM4-80GB"
	nodes := []*v1.Node{
		gt.MakeGPUNode("gpu").CPU("32").GFD(a100, 4, 81920).Obj(),
		gt.MakeGPUNode("cpu-only").CPU("128").Obj(),
	}
	var pods []*v1.Pod
	for _, name := range []string{"a", "b"} {
		p := gt.MakeGPUPod(name).Node("gpu").CPU("1").Obj()
		p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("1500Ki")
		pods = append(pods, p)
	}
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	policy, err := snap.Policy(gpu.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	plan := snap.PlanNodes(policy, func(*v1.Pod) bool { return true })
	if len(plan) != 1 {
		t.Fatalf("%d plan nodes; want the GPU node alone", len(plan))
	}
	// CPU: 32000 - 2 × 1000 = 30000m, under the cpu-only node's 128000m;
	// memory: 512Gi = 524288 MiB less 3000Ki (2.93 MiB) is 524285.07,
	// rounded down 524285.
	want := gpu.Host{Known: true, FreeMilliCPU: 30000, FreeMemoryMiB: 524285, MaxMilliCPU: 128000, MaxGPUs: 4}
	if got := plan[0].Host; got != want {
		t.Errorf("plan host = %+v; want %+v", got, want)
	}
	if n, _ := snap.Node("gpu"); n.FreeMemoryMiB != want.FreeMemoryMiB {
		t.Errorf("node shows %d MiB free; want %d, as the plan reads it", n.FreeMemoryMiB, want.FreeMemoryMiB)
	}
}
