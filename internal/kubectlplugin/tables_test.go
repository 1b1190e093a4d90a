package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// TestTablesShowConflicts: a pod given GPU-b as index 1 on a node where
// GPU-a has gone and GPU-b is index 0 now; both tables name the conflict.
func TestTablesShowConflicts(t *testing.T) {
	node := gt.MakeGPUNode("n").Devices(gpu.Device{Index: 0, UUID: "GPU-b", Model: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920}).Obj()
	pod := gt.MakeGPUPod("p").Node("n").GPUs(1).
		Assigned(gpu.Assignment{Node: "n", Devices: []int{1}, UUIDs: []string{"GPU-b"}, Milli: gpu.MilliPerGPU}).Obj()
	s := gpuview.Build([]*v1.Node{node}, []*v1.Pod{pod}, gpuview.Options{})
	const want = "conflict on n: GPU GPU-b is assigned as index 1 but is index 0 on node n now"
	var nodes, gpus bytes.Buffer
	if err := writeNodes(&nodes, s); err != nil {
		t.Fatal(err)
	}
	if err := writeGPUs(&gpus, s.Nodes); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"nodes": nodes.String(), "gpus": gpus.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("%s table lacks %q:\n%s", name, want, out)
		}
	}
	// The GPU counts its pod where its UUID is: index 0 is taken.
	if got := s.Nodes[0].GPUs[0].AllocatedMilli; got != gpu.MilliPerGPU {
		t.Errorf("GPU-b allocated %dm, want %dm", got, gpu.MilliPerGPU)
	}
}
