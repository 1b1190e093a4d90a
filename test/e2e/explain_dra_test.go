package e2e

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestExplainDRAGPUsAgainstTheAPIServer: kubectl gpusched reads the GPUs a
// node publishes through DRA and the claims DynamicResources allocated on
// them, from the API server. Node dra publishes 4 H100s, node dp has 4
// A100s of the device plugin. gpusched binds pod train with a one-GPU
// claim (on dra, the only node with DRA GPUs); then, with no scheduler
// running, pod wait asks for 2 GPUs through a claim and pod ann for 4
// GPUs as nvidia.com/gpu.
func TestExplainDRAGPUsAgainstTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("dra").Obj())
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, nvidiaSlice("dra", 4), metav1.CreateOptions{})
		return err
	})
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, nvidiaGPUClass(), metav1.CreateOptions{})
		return err
	})
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("dp").GFD(a100, 4, 81920).Obj())

	createClaim(ctx, t, c, "train-gpu", 1)
	train := withClaim(gt.MakeGPUPod("train").Obj(), "train-gpu")
	createPod(ctx, t, c, train)
	sched := startGPUSched(ctx, t, c)
	waitBound(ctx, t, c, []*v1.Pod{train})
	sched.Stop()

	createClaim(ctx, t, c, "wait-gpu", 2)
	createPod(ctx, t, c, withClaim(gt.MakeGPUPod("wait").Obj(), "wait-gpu"))
	createPod(ctx, t, c, gt.MakeGPUPod("ann").GPUs(4).Obj())

	run := func(args ...string) string { return kubectlGPUSched(ctx, t, c, args...) }
	expect := func(out string, wants ...string) { t.Helper(); expectOutput(t, out, wants...) }
	// dra: 1 GPU of 4 allocated (1000m, 25%).
	nodes := run("nodes")
	expect(nodes, "2 pending GPU pods")
	for _, line := range strings.Split(nodes, "\n") {
		if strings.HasPrefix(line, "dra ") && !(strings.Contains(line, "NVIDIA-H100-80GB-HBM3") && strings.Contains(line, "1000m (25%)")) {
			t.Errorf("node dra: %q, want its 4 H100s with 1000m (25%%) allocated", line)
		}
	}
	expect(nodes, "\ndra ")
	expect(run("gpus", "--node", "dra"), "default/train 1000m")
	// wait's claim goes to dra's 3 free H100s, not dp's A100s; ann's
	// nvidia.com/gpu to dp.
	expect(run("explain", "wait"), "it fits now on dra;")
	expect(run("explain", "ann"), "it fits now on dp;")
}
