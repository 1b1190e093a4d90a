package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// placementMode is how the scenarios' pods reach GPU placement, and what
// differs in what the user sees.
type placementMode struct {
	// createPod creates a pod for the scheduler under test.
	createPod func(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod *v1.Pod)
	// tooBigReasons are what the FailedScheduling event of a pod asking for
	// 7 whole A100 or T4 GPUs counts per node.
	tooBigReasons []string
}

var (
	// pluginMode: the gpusched scheduler, GPUPlacement on every node (the
	// example profile leaves nvidia.com/gpu to it).
	pluginMode = placementMode{
		createPod:     createPod,
		tooBigReasons: []string{"1 insufficient free GPUs", "1 GPU model not allowed", "1 too few GPUs on node", "1 node has no GPUs"},
	}
	// extenderMode: the stock scheduler, whose NodeResourcesFit rejects
	// h100-0, t4-0 and cpu-0 (fewer than 7 GPUs left to request) before the
	// extender sees them.
	extenderMode = placementMode{
		createPod:     createStockPod,
		tooBigReasons: []string{"1 insufficient free GPUs", "3 Insufficient nvidia.com/gpu"},
	}
)

// runPlacementScenarios runs the GPU placement scenarios against one control
// plane, in order; each scenario's pods stay bound, so later scenarios see
// the GPUs the earlier ones took. Both modes must give every pod the same
// node and GPUs.
func runPlacementScenarios(ctx context.Context, t *testing.T, c *testcluster.Cluster, mode placementMode) {
	create := mode.createPod
	t.Run("whole GPUs with model constraints", func(t *testing.T) {
		create(ctx, t, c, gt.MakeGPUPod("train").GPUs(4).Models(h100).Obj())
		create(ctx, t, c, gt.MakeGPUPod("infer").GPUs(1).Models(t4).Obj())
		if a := assignmentOf(ctx, t, c, "train"); a.Node != "h100-0" || !slices.Equal(a.Devices, []int{0, 1, 2, 3}) || a.Milli != 1000 {
			t.Errorf("train: %s, want h100-0 GPUs 0-3", a.String())
		}
		if a := assignmentOf(ctx, t, c, "infer"); a.Node != "t4-0" || !slices.Equal(a.Devices, []int{0}) {
			t.Errorf("infer: %s, want t4-0 GPU 0", a.String())
		}
	})

	t.Run("fractional pods share one GPU", func(t *testing.T) {
		for i := range 4 {
			name := fmt.Sprintf("share-%d", i)
			// Best-fit: the first share takes GPU 0; each next one the tightest GPU that fits, GPU 0 again.
			create(ctx, t, c, gt.MakeGPUPod(name).Milli(250).GPUMemory("10Gi").Models(a100).Obj())
			if a := assignmentOf(ctx, t, c, name); a.Node != "a100-0" || !slices.Equal(a.Devices, []int{0}) || a.Milli != 250 || a.MemoryMiB != 10240 {
				t.Errorf("%s: %s, want a100-0 GPU 0 with 250 milli and 10240 MiB", name, a.String())
			}
		}
		// GPU 0 is full now: a fifth share goes to the next GPU.
		create(ctx, t, c, gt.MakeGPUPod("share-4").Milli(250).Models(a100).Obj())
		if a := assignmentOf(ctx, t, c, "share-4"); !slices.Equal(a.Devices, []int{1}) {
			t.Errorf("share-4: %s, want GPU 1", a.String())
		}
	})

	t.Run("memory constraint keeps a share off small GPUs", func(t *testing.T) {
		// Without the memory request best-fit would pick t4-0 (1 of 4 GPUs
		// used: (1000+500)/4000 allocated after, against a100-0's
		// (1000+250+500)/8000). The T4s have 15 GiB, so the share goes to
		// a100-0, on GPU 1: the tightest GPU with 500 milli free.
		create(ctx, t, c, gt.MakeGPUPod("big-share").Milli(500).GPUMemory("40Gi").Models(a100, t4).Obj())
		if a := assignmentOf(ctx, t, c, "big-share"); a.Node != "a100-0" || !slices.Equal(a.Devices, []int{1}) {
			t.Errorf("big-share: %s, want a100-0 GPU 1", a.String())
		}
	})

	t.Run("a pod that fits nowhere stays pending with reasons per node", func(t *testing.T) {
		// a100-0 has 6 whole GPUs free (GPUs 0 and 1 hold shares); h100-0
		// has 4 free and is not an allowed model; t4-0 has 4 GPUs; cpu-0 none.
		create(ctx, t, c, gt.MakeGPUPod("too-big").GPUs(7).Models(a100, t4).Obj())
		ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "too-big", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message, append([]string{"0/4 nodes are available"}, mode.tooBigReasons...)...)
		// A share asks for no nvidia.com/gpu: every node gets GPUPlacement's
		// reasons in both modes.
		create(ctx, t, c, gt.MakeGPUPod("no-such-model").Milli(100).Models("NVIDIA-B200").Obj())
		ev = testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "no-such-model", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message, "0/4 nodes are available", "3 GPU model not allowed", "1 node has no GPUs")
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "too-big", 0)
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "no-such-model", 0)
	})

	t.Run("a malformed annotation is reported and others still schedule", func(t *testing.T) {
		create(ctx, t, c, gt.MakeGPUPod("malformed").Annotation(gpu.AnnotationMilli, "half").Obj())
		create(ctx, t, c, gt.MakeGPUPod("after-malformed").GPUs(1).Models(t4).Obj())
		ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "malformed", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message, gpu.AnnotationMilli, `"half"`, "from 1 to 999")
		if a := assignmentOf(ctx, t, c, "after-malformed"); a.Node != "t4-0" {
			t.Errorf("after-malformed: %s, want t4-0", a.String())
		}
		// Fixing the annotation requeues the pod, and it schedules.
		patch := []byte(`{"metadata":{"annotations":{"` + gpu.AnnotationMilli + `":"100"}}}`)
		if _, err := c.Client.CoreV1().Pods("default").Patch(ctx, "malformed", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if a := assignmentOf(ctx, t, c, "malformed"); a.Milli != 100 {
			t.Errorf("malformed after the fix: %s, want 100 milli-GPU", a.String())
		}
	})

	assertNoGPUGivenTwice(ctx, t, c)
}
