package simnode

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestAgentSimulatedNode: the node agent publishes a mock DGX H100's GPUs on
// its Node, and the containers of pods created through the node's NRI
// runtime get the GPUs of their assignment, or are refused without one.
func TestAgentSimulatedNode(t *testing.T) {
	ctx := context.Background()
	QuietNRILogs()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}})
	n, err := Start(ctx, Config{Name: "gpu-0", Machine: nvmlmock.DGXH100(), Nodes: client.CoreV1().Nodes(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	node, err := client.CoreV1().Nodes().Get(ctx, "gpu-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.InventoryFromNode(node)
	if err != nil || inv.Len() != 8 || inv.Devices[3].UUID != nvmlmock.GPUUUID(3) {
		t.Fatalf("published inventory %+v, %v: want the 8 GPUs of the mock", inv, err)
	}

	a := gpu.Assignment{Node: "gpu-0", Devices: []int{2, 3}, Milli: gpu.MilliPerGPU, UUIDs: []string{nvmlmock.GPUUUID(2), nvmlmock.GPUUUID(3)}}
	ctrs, err := n.CreatePod(ctx, gt.MakeGPUPod("train").GPUs(2).UID("u1").Assigned(a).Obj())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := GivenGPUs(ctrs[0]); err != nil || !slices.Equal(got, a.UUIDs) {
		t.Errorf("train receives %v (%v), want %v", got, err, a.UUIDs)
	}
	_, err = n.CreatePod(ctx, gt.MakeGPUPod("unplaced").Milli(250).UID("u2").Obj())
	if err == nil || !strings.Contains(err.Error(), "has no assignment") {
		t.Errorf("a share without assignment: %v, want refused for having no assignment", err)
	}

	// A CUDA image sets NVIDIA_VISIBLE_DEVICES=all and the pod spec sets it
	// again: the runtime's spec holds it twice. Refused, naming the
	// variable; a pod that sets it once is confined as usual.
	dup := gt.MakeGPUPod("tutorial").UID("u3").Obj()
	dup.Spec.Containers[0].Env = []v1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	if ctrs, err := n.CreatePod(ctx, dup); err == nil {
		got, gerr := GivenGPUs(ctrs[0])
		t.Errorf("a pod that sets NVIDIA_VISIBLE_DEVICES over the image's was created and receives %v (%v, spec %s), want refused", got, gerr, Describe(ctrs[0]))
	} else if !strings.Contains(err.Error(), "NVIDIA_VISIBLE_DEVICES") || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("refusal %q does not name the duplicated variable and how often it is set", err)
	}
	plain := gt.MakeGPUPod("cpu-only").UID("u4").Obj()
	ctrs, err = n.CreatePod(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := GivenGPUs(ctrs[0]); err != nil || len(got) != 0 {
		t.Errorf("a pod without GPUs receives %v (%v, spec %s), want none", got, err, Describe(ctrs[0]))
	}
}
