package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGPUPlacement runs the placement scenarios against one control plane and
// one gpusched scheduler, in order; each scenario's pods stay bound, so later
// scenarios see the GPUs the earlier ones took.
func TestGPUPlacement(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, n := range gpuNodes() {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	startGPUSched(ctx, t, c)

	t.Run("whole GPUs with model constraints", func(t *testing.T) {
		createPod(ctx, t, c, gt.MakeGPUPod("train").GPUs(4).Models(h100).Obj())
		createPod(ctx, t, c, gt.MakeGPUPod("infer").GPUs(1).Models(t4).Obj())
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
			createPod(ctx, t, c, gt.MakeGPUPod(name).Milli(250).GPUMemory("10Gi").Models(a100).Obj())
			// Best-fit: the first share takes GPU 0; each next one the tightest GPU that fits, GPU 0 again.
			if a := assignmentOf(ctx, t, c, name); a.Node != "a100-0" || !slices.Equal(a.Devices, []int{0}) || a.Milli != 250 || a.MemoryMiB != 10240 {
				t.Errorf("%s: %s, want a100-0 GPU 0 with 250 milli and 10240 MiB", name, a.String())
			}
		}
		// GPU 0 is full now: a fifth share goes to the next GPU.
		createPod(ctx, t, c, gt.MakeGPUPod("share-4").Milli(250).Models(a100).Obj())
		if a := assignmentOf(ctx, t, c, "share-4"); !slices.Equal(a.Devices, []int{1}) {
			t.Errorf("share-4: %s, want GPU 1", a.String())
		}
	})

	t.Run("memory constraint keeps a share off small GPUs", func(t *testing.T) {
		// Without the memory request best-fit would pick t4-0 (1 of 4 GPUs
		// used: (1000+500)/4000 allocated after, against a100-0's
		// (1000+250+500)/8000). The T4s have 15 GiB, so the share goes to
		// a100-0, on GPU 1: the tightest GPU with 500 milli free.
		createPod(ctx, t, c, gt.MakeGPUPod("big-share").Milli(500).GPUMemory("40Gi").Models(a100, t4).Obj())
		if a := assignmentOf(ctx, t, c, "big-share"); a.Node != "a100-0" || !slices.Equal(a.Devices, []int{1}) {
			t.Errorf("big-share: %s, want a100-0 GPU 1", a.String())
		}
	})

	t.Run("a pod that fits nowhere stays pending with reasons per node", func(t *testing.T) {
		// a100-0 has 6 whole GPUs free (GPUs 0 and 1 hold shares); h100-0
		// is not an allowed model; t4-0 has 4 GPUs; cpu-0 none.
		createPod(ctx, t, c, gt.MakeGPUPod("too-big").GPUs(7).Models(a100, t4).Obj())
		ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "too-big", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message,
			"0/4 nodes are available",
			"1 insufficient free GPUs",
			"1 GPU model not allowed",
			"1 too few GPUs on node",
			"1 node has no GPUs")
		// A share of a model no node has: every GPU node gives the model
		// reason, the CPU node its own.
		createPod(ctx, t, c, gt.MakeGPUPod("no-such-model").Milli(100).Models("NVIDIA-B200").Obj())
		ev = testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "no-such-model", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message, "0/4 nodes are available", "3 GPU model not allowed", "1 node has no GPUs")
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "too-big", 0)
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "no-such-model", 0)
	})

	t.Run("a malformed annotation is reported and others still schedule", func(t *testing.T) {
		createPod(ctx, t, c, gt.MakeGPUPod("malformed").Annotation(gpu.AnnotationMilli, "half").Obj())
		createPod(ctx, t, c, gt.MakeGPUPod("after-malformed").GPUs(1).Models(t4).Obj())
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

// TestSchedulerRestart stops the scheduler mid-run and starts a new one: the
// new instance rebuilds its ledger from the annotations of the bound pods and
// gives no GPU twice. The first instance writes assignments in PreBind, the
// second in Bind: both paths leave the same record.
func TestSchedulerRestart(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj())

	first := startGPUSchedPreBind(ctx, t, c)
	createPod(ctx, t, c, gt.MakeGPUPod("before-0").Milli(600).Obj())
	createPod(ctx, t, c, gt.MakeGPUPod("before-1").GPUs(1).Obj())
	before0, before1 := assignmentOf(ctx, t, c, "before-0"), assignmentOf(ctx, t, c, "before-1")
	if before0.Devices[0] == before1.Devices[0] {
		t.Fatalf("one GPU given to a share and a whole-GPU pod: %s, %s", before0.String(), before1.String())
	}
	first.Stop()

	// Created while no scheduler runs; the new one must see GPU 0 at 600 and GPU 1 full.
	createPod(ctx, t, c, gt.MakeGPUPod("after-fits").Milli(400).Obj())
	createPod(ctx, t, c, gt.MakeGPUPod("after-too-big").Milli(500).Obj())
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "after-fits", 0)

	startGPUSched(ctx, t, c)
	if a := assignmentOf(ctx, t, c, "after-fits"); a.Devices[0] != before0.Devices[0] {
		t.Errorf("after-fits: %s, want the share GPU %d", a.String(), before0.Devices[0])
	}
	ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "after-too-big", "FailedScheduling", timeout)
	containsAll(t, "event", ev.Message, "insufficient free GPU share")
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestPriorityOrdersQueue: with one GPU left, the pod with the higher
// PriorityClass gets it, whatever the creation order.
func TestPriorityOrdersQueue(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj())
	for name, value := range map[string]int32{"gpu-batch": 100, "gpu-production": 100000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Pod admission reads classes from an informer: wait until it sees this one.
		waitForPriorityClass(ctx, t, c, name)
	}
	// Both wait in the queue before the scheduler starts; the batch pod is older.
	batch := gt.MakeGPUPod("batch").GPUs(1).Obj()
	batch.Spec.PriorityClassName = "gpu-batch"
	createPod(ctx, t, c, batch)
	serve := gt.MakeGPUPod("serve").GPUs(1).Obj()
	serve.Spec.PriorityClassName = "gpu-production"
	createPod(ctx, t, c, serve)

	startGPUSched(ctx, t, c)
	if a := assignmentOf(ctx, t, c, "serve"); a.Node != "a100-0" {
		t.Errorf("serve: %s", a.String())
	}
	ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "batch", "FailedScheduling", timeout)
	containsAll(t, "event", ev.Message, "1 insufficient free GPUs")
}
