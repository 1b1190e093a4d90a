package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/extender"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestExtenderGPUPlacement runs TestGPUPlacement's scenarios in extender
// mode: the stock kube-scheduler (default plugins, no gpusched plugin) with
// the extender on loopback, once with nodeCacheCapable: true (node names)
// and once with false (full Node objects). The same pods get the same nodes,
// GPUs, milli-GPU and memory as in plugin mode.
//
// One difference is in the events: the stock profile's NodeResourcesFit
// still counts nvidia.com/gpu and runs before the extender, so a node it
// rejects says "Insufficient nvidia.com/gpu" instead of gpusched's reason.
func TestExtenderGPUPlacement(t *testing.T) {
	for _, nodeCacheCapable := range []bool{true, false} {
		t.Run(fmt.Sprintf("nodeCacheCapable=%t", nodeCacheCapable), func(t *testing.T) {
			ctx := context.Background()
			c := testcluster.Start(t)
			for _, n := range gpuNodes() {
				testcluster.CreateNode(ctx, t, c.Client, n)
			}
			addr := freeLoopbackAddr(t)
			startExtender(ctx, t, c, addr)
			c.StartScheduler(ctx, t, extenderConfig(t, addr, nodeCacheCapable))
			runPlacementScenarios(ctx, t, c, extenderMode)
		})
	}
}

// TestExtenderRestart stops the extender mid-run (its server and informers)
// while the scheduler keeps running, creates pods, and starts a new extender
// on the same address: it rebuilds every GPU's allocation from the
// assignment annotations its informers list, places the new pods on the GPUs
// left free, and gives no GPU twice.
func TestExtenderRestart(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj())
	addr := freeLoopbackAddr(t)
	first := startExtender(ctx, t, c, addr)
	c.StartScheduler(ctx, t, extenderConfig(t, addr, true))

	createStockPod(ctx, t, c, gt.MakeGPUPod("before-0").Milli(600).Obj())
	createStockPod(ctx, t, c, gt.MakeGPUPod("before-1").GPUs(1).Obj())
	before0, before1 := assignmentOf(ctx, t, c, "before-0"), assignmentOf(ctx, t, c, "before-1")
	if before0.Devices[0] == before1.Devices[0] {
		t.Fatalf("one GPU given to a share and a whole-GPU pod: %s, %s", before0.String(), before1.String())
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	// Created while no extender runs: the scheduler cannot place them (its
	// extender calls fail) and retries them with backoff. The new extender
	// must see the share GPU at 600 milli and the other GPU full.
	createStockPod(ctx, t, c, gt.MakeGPUPod("after-fits").Milli(400).Obj())
	createStockPod(ctx, t, c, gt.MakeGPUPod("after-too-big").Milli(500).Obj())
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "after-fits", time.Second)

	startExtender(ctx, t, c, addr)
	if a := assignmentOf(ctx, t, c, "after-fits"); a.Devices[0] != before0.Devices[0] {
		t.Errorf("after-fits: %s, want the share GPU %d", a.String(), before0.Devices[0])
	}
	waitForEventWith(ctx, t, c, "after-too-big", "insufficient free GPU share")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "after-too-big", 0)
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestExtenderKeepsOffDRANodes tries to get, through the stock scheduler
// and the extender, a GPU that NVIDIA's DRA driver also hands out: both-0
// publishes its 2 GPUs both ways (GFD labels and allocatable
// nvidia.com/gpu for the device plugin, a ResourceSlice of gpu.nvidia.com
// for DRA), dp-0 by the device plugin only. Two 1-GPU pods fill dp-0; a
// third waits with the extender's reason, although both-0's allocatable
// count would take it: an annotation there would book a GPU that a claim
// can be allocated too.
func TestExtenderKeepsOffDRANodes(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("both-0").GFD(a100, 2, 81920).Obj())
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("dp-0").GFD(a100, 2, 81920).Obj())
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, nvidiaSlice("both-0", 2), metav1.CreateOptions{})
		return err
	})
	addr := freeLoopbackAddr(t)
	startExtender(ctx, t, c, addr)
	c.StartScheduler(ctx, t, extenderConfig(t, addr, true))

	for _, name := range []string{"gpu-0", "gpu-1"} {
		createStockPod(ctx, t, c, gt.MakeGPUPod(name).GPUs(1).Obj())
		if a := assignmentOf(ctx, t, c, name); a.Node != "dp-0" {
			t.Errorf("%s on %s, want dp-0: both-0's GPUs are DRA's", name, a.Node)
		}
	}
	createStockPod(ctx, t, c, gt.MakeGPUPod("gpu-2").GPUs(1).Obj())
	waitForEventWith(ctx, t, c, "gpu-2", "node GPUs allocated by DRA")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "gpu-2", 0)
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestExtenderPreemption: the scheduler picks preemption victims by its own
// plugins, which count only whole nvidia.com/gpu requests; the extender's
// preempt verb chooses the victims by the GPUs they free, among pods of
// lower priority than the preemptor, and drops a node where none would do.
//
// On a100-0 (2 GPUs) a low-priority whole-GPU pod and a share of the
// urgent class hold one GPU each. For an urgent 2-GPU pod, NodeResourcesFit
// would evict the whole-GPU pod alone, which frees one GPU, not two, and
// the share may not be evicted: the extender drops the node and nothing is
// evicted. On h100-0 (1 GPU) evicting the low-priority pod does free the
// GPU: the extender keeps the node, the scheduler preempts.
func TestExtenderPreemption(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj())
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("h100-0").GFD(h100, 1, 81559).Obj())
	for name, value := range map[string]int32{"gpu-low": 100, "gpu-urgent": 100000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForPriorityClass(ctx, t, c, name)
	}
	addr := freeLoopbackAddr(t)
	startExtender(ctx, t, c, addr)
	c.StartScheduler(ctx, t, extenderConfig(t, addr, true))

	withPriority := func(w *gt.PodWrapper, class string) *gt.PodWrapper {
		w.Spec.PriorityClassName = class
		return w
	}
	createStockPod(ctx, t, c, withPriority(gt.MakeGPUPod("low-whole").GPUs(1).Models(a100), "gpu-low").Obj())
	createStockPod(ctx, t, c, withPriority(gt.MakeGPUPod("urgent-share").Milli(500).Models(a100), "gpu-urgent").Obj())
	createStockPod(ctx, t, c, withPriority(gt.MakeGPUPod("low-h100").GPUs(1).Models(h100), "gpu-low").Obj())
	for _, name := range []string{"low-whole", "urgent-share", "low-h100"} {
		assignmentOf(ctx, t, c, name)
	}

	createStockPod(ctx, t, c, withPriority(gt.MakeGPUPod("urgent-a100").GPUs(2).Models(a100), "gpu-urgent").Obj())
	testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "urgent-a100", "FailedScheduling", timeout)
	assertNotDeleted(ctx, t, c, "low-whole", 2*time.Second)

	createStockPod(ctx, t, c, withPriority(gt.MakeGPUPod("urgent-h100").GPUs(1).Models(h100), "gpu-urgent").Obj())
	waitForDeletion(ctx, t, c, "low-h100")
	// No kubelet ends the victim's containers; finish its deletion as one would.
	zero := int64(0)
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "low-h100", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if a := assignmentOf(ctx, t, c, "urgent-h100"); a.Node != "h100-0" || !slices.Equal(a.Devices, []int{0}) {
		t.Errorf("urgent-h100: %s, want h100-0 GPU 0", a.String())
	}
	assertNotDeleted(ctx, t, c, "low-whole", 0)
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "urgent-a100", 0)
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestExtenderHonoursReservations: the stock kube-scheduler with the
// extender, and a reservation such as the defragmenter writes: node b's
// two A100s reserved for pod "trainer" (2 GPUs). Created before the
// scheduler starts, "other" (2 GPUs, first in the queue) and the trainer
// both wait; then other goes to a (b's GPUs are reserved), and the trainer
// to b, on the reserved GPUs. Without the extender steering it, the
// reservation would hold b's GPUs against the trainer too, and it would
// wait until the reservation expires.
func TestExtenderHonoursReservations(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, name := range []string{"a", "b"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD(a100, 2, 81920).Obj())
	}
	addr := freeLoopbackAddr(t)
	startExtender(ctx, t, c, addr)
	createStockPod(ctx, t, c, gt.MakeGPUPod("other").GPUs(2).Obj())
	time.Sleep(time.Second) // older: first in the queue
	createStockPod(ctx, t, c, gt.MakeGPUPod("trainer").GPUs(2).Obj())
	trainer, err := c.Client.CoreV1().Pods("default").Get(ctx, "trainer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := gpu.Reservation{ID: "gpusched-defragmenter/test-1/pod", Pod: trainer.UID, GPUs: "node=b;gpus=0,1;milli=1000;memory=0", Expires: time.Now().Add(10 * time.Minute)}
	value := gpu.FormatReservations([]gpu.Reservation{r})
	if _, err := patchAnnotation(ctx, c.Client.CoreV1().Nodes(), "b", gpu.AnnotationReservations, &value); err != nil {
		t.Fatal(err)
	}
	// Once the extender's informer has the reservation, its filter sends
	// the trainer to b alone.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		body, _ := json.Marshal(&extenderv1.ExtenderArgs{Pod: trainer, NodeNames: &[]string{"a", "b"}})
		resp, err := http.Post("http://"+addr+"/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var result extenderv1.ExtenderFilterResult
		if json.NewDecoder(resp.Body).Decode(&result) != nil {
			return false, nil
		}
		return result.FailedAndUnresolvableNodes["a"] == extender.MsgReservedElsewhere, nil
	})
	if err != nil {
		t.Fatalf("the extender never read the reservation: %v", err)
	}
	c.StartScheduler(ctx, t, extenderConfig(t, addr, true))

	if a := assignmentOf(ctx, t, c, "other"); a.Node != "a" {
		t.Errorf("other on %s, want a: b's GPUs are reserved", a.String())
	}
	if a := assignmentOf(ctx, t, c, "trainer"); a.String() != r.GPUs {
		t.Errorf("trainer got %s, its reservation is %s", a.String(), r.GPUs)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}
