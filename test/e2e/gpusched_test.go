package e2e

import (
	"context"
	"testing"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGPUPlacement runs the placement scenarios (scenarios_test.go) with one
// gpusched scheduler.
func TestGPUPlacement(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, n := range gpuNodes() {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	startGPUSched(ctx, t, c)

	runPlacementScenarios(ctx, t, c, pluginMode)
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
