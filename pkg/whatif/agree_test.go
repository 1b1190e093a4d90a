package whatif

import (
	"math"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// TestFragmentationAsGPUView: what-if's fragmentation before any new pod is
// the cluster's fragmentation as `kubectl gpusched nodes` and the dashboard
// report it (gpuview), on a cluster whose workload has CPU-only pods: both
// weigh the same typical pods (gpu.WorkloadDemand), so the two commands
// agree, and both count a pod resized in place as the scheduler does. Two
// 4-GPU A100 nodes with 64 CPUs; n0 has GPUs 0-1 whole and 48 CPUs of
// CPU-only pods, so its 2 free GPUs have 16 CPUs left; n1 has a half share
// on GPU 0 and a CPU-only pod resized from 4 CPUs to 58. Pending: more CPU-only pods of 16 CPUs and 1-GPU
// pods of 8 CPUs, a finished pod and a pending pod being deleted, which
// count for neither.
func TestFragmentationAsGPUView(t *testing.T) {
	nodes := []*v1.Node{
		a100("n0", 4).Obj(),
		a100("n1", 4).Obj(),
	}
	pods := []*v1.Pod{
		gt.MakeGPUPod("w0").GPUs(2).CPU("8").Node("n0").Assigned(gpu.Assignment{Node: "n0", Devices: []int{0, 1}, Milli: 1000}).Obj(),
		gt.MakeGPUPod("c0").CPU("24").Node("n0").Obj(),
		gt.MakeGPUPod("c1").CPU("16").Node("n0").Obj(),
		gt.MakeGPUPod("s0").Milli(500).CPU("4").Node("n1").Assigned(gpu.Assignment{Node: "n1", Devices: []int{0}, Milli: 500}).Obj(),
		// Resized in place from 4 CPUs to 58: n1 has 64 - 4 - 58 = 2 CPUs
		// left as the scheduler counts them (gpu.RequestsOnNode), too few
		// for any typical GPU pod (8 CPUs), so all its free GPU is
		// fragmented; counted from the spec it would have 56.
		resized(gt.MakeGPUPod("r0").CPU("4").Node("n1").Obj(), "58"),
		gt.MakeGPUPod("c2").CPU("16").Obj(),
		gt.MakeGPUPod("c3").CPU("16").Obj(),
		gt.MakeGPUPod("c4").CPU("16").Obj(),
		gt.MakeGPUPod("g0").GPUs(1).CPU("8").Obj(),
		gt.MakeGPUPod("g1").GPUs(1).CPU("8").Obj(),
		gt.MakeGPUPod("done").GPUs(4).CPU("60").Node("n1").Phase(v1.PodSucceeded).Obj(),
	}
	leaving := gt.MakeGPUPod("leaving").GPUs(4).CPU("60").Obj()
	now := metav1.Now()
	leaving.DeletionTimestamp = &now
	pods = append(pods, leaving)

	view := gpuview.Build(nodes, pods, gpuview.Options{})
	results, err := Run(Input{Nodes: nodes, Pods: pods}, Options{Policies: []string{DefaultPolicy}})
	if err != nil {
		t.Fatal(err)
	}
	got, want := results[0].Summary.FragmentedMilliBefore, view.Cluster.FragmentedMilli
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("what-if fragmentation %.3f milli-GPU, gpuview %.3f: the same cluster measured two ways", got, want)
	}
	if want == 0 {
		t.Errorf("no fragmentation at all: the cluster does not exercise the typical pods")
	}
}
