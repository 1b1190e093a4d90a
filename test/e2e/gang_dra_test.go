package e2e

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGangOfClaimPods places a gang whose pods take their GPUs through
// ResourceClaimTemplates (claims made by the real resourceclaim
// controller, allocated by DynamicResources with the devices GPUPlacement
// chooses) on one GPU model and one NVLink clique, as a gang of annotation
// pods is placed (TestGangOneModel, TestGangTopology).
//
// The GPUs are DRA devices only: an A100 node of 8 GPUs, 4 of them held by
// another pod's claim, and three H100 nodes of 8, two in clique nvl-1 and
// one in nvl-2. The gang is 4 pods of 4 GPUs (16). Only H100 holds it with
// every GPU free (A100: one node of 8 holds 2 pods), so every pod goes to
// H100, although the A100 node's 4 free GPUs fit a pod exactly, which the
// policy prefers for a pod alone. Among the H100s, clique nvl-1 (2 × 8 = 16
// free) holds the whole gang and nvl-2 (8) does not, so the gang stays in
// nvl-1. Read pod by pod, with no gang plan on DRA GPUs, the first pod goes
// to the A100 node.
func TestGangOfClaimPods(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	nodes := []struct {
		name, product, clique string
	}{
		{"dra-a100", "NVIDIA A100-SXM4-80GB", ""},
		{"dra-h100-0", "NVIDIA H100 80GB HBM3", "nvl-1"},
		{"dra-h100-1", "NVIDIA H100 80GB HBM3", "nvl-1"},
		{"dra-h100-2", "NVIDIA H100 80GB HBM3", "nvl-2"},
	}
	for _, n := range nodes {
		node := gt.MakeGPUNode(n.name)
		if n.clique != "" {
			node = node.Clique(n.clique)
		}
		testcluster.CreateNode(ctx, t, c.Client, node.Obj())
		slice := gt.MakeNVIDIASlice("00000-gpu.nvidia.com-"+n.name, n.name)
		for i := range 8 {
			slice.GPU(i, fmt.Sprintf("GPU-%s-%d", n.name, i), n.product, 81920, fmt.Sprintf("pci0000:%02x", 0x17+0x12*i))
		}
		createDRAObject(t, func() error {
			_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, slice.Obj(), metav1.CreateOptions{})
			return err
		})
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, nvidiaGPUClass(), metav1.CreateOptions{})
		return err
	})
	c.StartResourceClaimController(ctx, t)
	createClaimTemplate(ctx, t, c, "four-gpus", 4)
	startGangSched(ctx, t, c, gangConfig(t))

	filler := withClaimTemplate(gt.MakeGPUPod("filler").Obj(), "four-gpus")
	filler.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "dra-a100"}
	createPod(ctx, t, c, filler)
	waitBound(ctx, t, c, []*v1.Pod{filler})

	createPodGroup(ctx, t, dyn, "train", 4, 0)
	var gang []*v1.Pod
	for i := range 4 {
		pod := withClaimTemplate(gt.MakeGPUPod(fmt.Sprintf("train-%d", i)).Obj(), "four-gpus")
		pod.Labels = map[string]string{podgroup.LabelPodGroup: "train"}
		gang = append(gang, pod)
	}
	for _, p := range gang {
		createPod(ctx, t, c, p)
	}
	waitBound(ctx, t, c, gang)
	for _, p := range gang {
		got, err := c.Client.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node := got.Spec.NodeName; node != "dra-h100-0" && node != "dra-h100-1" {
			t.Errorf("%s on %s, want the H100s of clique nvl-1 (dra-h100-0, dra-h100-1)", p.Name, node)
		}
	}
	// 4 devices for the filler, 4 × 4 for the gang; each claim on its
	// pod's node, no device in two claims.
	if held := assertDRAPlacement(ctx, t, c); held != 4+4*4 {
		t.Errorf("%d DRA devices allocated, want 20", held)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}
