package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestPreemptFreesOneGPU: on a100-0 (2 GPUs) one low-priority whole-GPU pod,
// started an hour ago, holds one GPU; four low-priority quarter-GPU pods,
// started ten minutes ago, share the other. An urgent whole-GPU pod must
// evict one of the two sets.
//
// GPUPreemption frees the GPU whose holders cost least (gpu.VictimCost):
// both sets are of one priority, so the fewest pods — the whole-GPU pod,
// 1 pod against 4. DefaultPreemption reprieves the most important pods
// first, and of one priority the oldest is the most important: it keeps the
// whole-GPU pod and evicts the four quarters. The subtest with
// DefaultPreemption shows that the scenario tells the two apart.
func TestPreemptFreesOneGPU(t *testing.T) {
	for _, tc := range []struct {
		name        string
		config      func(*testing.T) string
		wantEvicted []string
		wantKept    []string
	}{
		{"GPUPreemption", exampleConfig, []string{"whole-old"}, []string{"quarter-0", "quarter-1", "quarter-2", "quarter-3"}},
		{"DefaultPreemption", withDefaultPreemption, []string{"quarter-0", "quarter-1", "quarter-2", "quarter-3"}, []string{"whole-old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := testcluster.Start(t)
			testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj())
			createPriorityClasses(ctx, t, c)
			c.StartScheduler(ctx, t, tc.config(t), plugins.CommandOptions()...)

			createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod("whole-old").GPUs(1), "gpu-low").Obj())
			whole := assignmentOf(ctx, t, c, "whole-old")
			for _, name := range []string{"quarter-0", "quarter-1", "quarter-2", "quarter-3"} {
				createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod(name).Milli(250), "gpu-low").Obj())
				if a := assignmentOf(ctx, t, c, name); a.Devices[0] == whole.Devices[0] {
					t.Fatalf("%s shares GPU %d with whole-old", name, a.Devices[0])
				}
				setStartTime(ctx, t, c, name, 10*time.Minute)
			}
			setStartTime(ctx, t, c, "whole-old", time.Hour)

			createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod("urgent").GPUs(1), "gpu-urgent").Obj())
			for _, name := range tc.wantEvicted {
				waitForDeletion(ctx, t, c, name)
			}
			for _, name := range tc.wantKept {
				assertNotDeleted(ctx, t, c, name, 0)
			}
			finishDeletions(ctx, t, c)
			assignmentOf(ctx, t, c, "urgent")
			for _, name := range tc.wantKept {
				assertNotDeleted(ctx, t, c, name, 0)
			}
			assertNoGPUGivenTwice(ctx, t, c)
		})
	}
}

// TestPreemptShareEvictsShares: one GPU holds three low-priority 300-milli
// shares of 10, 30 and 10 GiB of its 80: 100 milli-GPU and 30 GiB are free.
// An urgent 100-milli share that needs 60 GiB lacks 30 GiB. The one share
// that frees it alone is the 30-GiB one (the two 10-GiB shares free 20
// together), so it goes and the other two stay: shares are evicted as
// shares, as few as the pod needs, never the whole GPU.
func TestPreemptShareEvictsShares(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj())
	createPriorityClasses(ctx, t, c)
	startGPUSched(ctx, t, c)

	for _, share := range []struct{ name, memory string }{{"share-a", "10Gi"}, {"share-b", "30Gi"}, {"share-c", "10Gi"}} {
		createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod(share.name).Milli(300).GPUMemory(share.memory), "gpu-low").Obj())
		assignmentOf(ctx, t, c, share.name)
	}

	createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod("urgent").Milli(100).GPUMemory("60Gi"), "gpu-urgent").Obj())
	waitForDeletion(ctx, t, c, "share-b")
	finishDeletions(ctx, t, c)
	assignmentOf(ctx, t, c, "urgent")
	assertNotDeleted(ctx, t, c, "share-a", 0)
	assertNotDeleted(ctx, t, c, "share-c", 0)
	assertNoGPUGivenTwice(ctx, t, c)
}

// createPriorityClasses creates gpu-low (100), gpu-urgent (100000) and
// gpu-vip (1000000) and
// waits until pods may name them.
func createPriorityClasses(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	for name, value := range map[string]int32{"gpu-low": 100, "gpu-urgent": 100000, "gpu-vip": 1000000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForPriorityClass(ctx, t, c, name)
	}
}

func withPriorityClass(w *gt.PodWrapper, class string) *gt.PodWrapper {
	w.Spec.PriorityClassName = class
	return w
}

// withDefaultPreemption is the example configuration with upstream's
// DefaultPreemption in place of GPUPreemption.
func withDefaultPreemption(t *testing.T) string {
	cfg := exampleConfig(t)
	return replaceOnce(t, replaceOnce(t, cfg, "      - name: DefaultPreemption\n", ""), "      - name: GPUPreemption\n", "      - name: DefaultPreemption\n")
}

// setStartTime sets a pod's status.startTime to ago before now, as a
// kubelet would have when it started the pod: preemption orders victims of
// one priority by it.
func setStartTime(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, ago time.Duration) {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := metav1.NewTime(time.Now().Add(-ago))
	pod.Status.StartTime = &start
	if _, err := c.Client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// finishDeletions ends the deletion of every pod being deleted, as the
// kubelet would once their containers stopped: no kubelet runs here.
func finishDeletions(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			err := c.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil && !strings.Contains(err.Error(), "not found") {
				t.Fatal(err)
			}
		}
	}
}

// deletingPods returns which of names are being deleted or gone.
func deletingPods(ctx context.Context, c *testcluster.Cluster, names ...string) ([]string, error) {
	var out []string
	for _, name := range names {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.DeletionTimestamp != nil {
			out = append(out, name)
		}
	}
	return out, nil
}

// TestPreemptGangGoesWhole: the gang low-gang (minMember 2) has one pod on
// each of node-a and node-b (2 GPUs each); a single low-priority pod holds
// each node's other GPU. An urgent 2-GPU pod needs a whole node: on either,
// the victims are the single pod and the gang — both its pods, the one on
// the other node too, so that no gang runs with a member missing. The
// other node's single pod stays.
func TestPreemptGangGoesWhole(t *testing.T) {
	ctx := context.Background()
	c, dyn := startGangPreemptionCluster(ctx, t)

	createPodGroup(ctx, t, dyn, "low-gang", 2, 30)
	for _, p := range []struct{ name, group, node string }{
		{"gang-a", "low-gang", "node-a"}, {"gang-b", "low-gang", "node-b"},
		{"single-a", "", "node-a"}, {"single-b", "", "node-b"},
	} {
		pod := gangPod(p.name, p.group, 1)
		pod.Spec.PriorityClassName = "gpu-low"
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": p.node}
		createPod(ctx, t, c, pod)
	}
	for _, name := range []string{"gang-a", "gang-b", "single-a", "single-b"} {
		assignmentOf(ctx, t, c, name)
	}

	createPod(ctx, t, c, withPriorityClass(gt.MakeGPUPod("urgent").GPUs(2), "gpu-urgent").Obj())
	waitForDeletion(ctx, t, c, "gang-a")
	waitForDeletion(ctx, t, c, "gang-b")
	singles, err := deletingPods(ctx, c, "single-a", "single-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(singles) != 1 {
		t.Fatalf("single pods evicted: %v, want exactly one (the urgent pod's node's)", singles)
	}
	finishDeletions(ctx, t, c)
	a := assignmentOf(ctx, t, c, "urgent")
	if want := strings.TrimPrefix(singles[0], "single-"); a.Node != "node-"+want {
		t.Errorf("urgent placed on %s, but single-%s's node was freed", a.Node, want)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestPreemptGangOnlyIfWholeGangFits: the urgent gang urgent-gang needs
// two 2-GPU pods, a whole node-a and a whole node-b. A gpu-vip pod, which
// no urgent pod may evict, holds one GPU of node-a; low-priority pods hold
// the rest. Evicting every low-priority pod would leave room for one
// urgent pod, not two, so none is evicted — DefaultPreemption would evict
// node-b's pods for the first gang pod, in vain — and the pods' event says
// why.
func TestPreemptGangOnlyIfWholeGangFits(t *testing.T) {
	ctx := context.Background()
	c, dyn := startGangPreemptionCluster(ctx, t)

	for _, p := range []struct{ name, class, node string }{
		{"vip", "gpu-vip", "node-a"}, {"low-a", "gpu-low", "node-a"},
		{"low-b0", "gpu-low", "node-b"}, {"low-b1", "gpu-low", "node-b"},
	} {
		pod := withPriorityClass(gt.MakeGPUPod(p.name).GPUs(1), p.class).Obj()
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": p.node}
		createPod(ctx, t, c, pod)
		assignmentOf(ctx, t, c, p.name)
	}

	createPodGroup(ctx, t, dyn, "urgent-gang", 2, 30)
	for _, name := range []string{"urgent-0", "urgent-1"} {
		pod := gangPod(name, "urgent-gang", 2)
		pod.Spec.PriorityClassName = "gpu-urgent"
		createPod(ctx, t, c, pod)
	}
	event := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "urgent-0", "FailedScheduling", timeout)
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"urgent-0", "urgent-1"} {
			events, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if strings.Contains(e.Message, "would not have 2 pods placed") {
					event = &e
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no event says the gang would not fit; last: %q", event.Message)
	}
	containsAll(t, "event", event.Message, "urgent-gang", "priority below 100000")
	for _, name := range []string{"vip", "low-a", "low-b0", "low-b1"} {
		assertNotDeleted(ctx, t, c, name, 0)
	}
	assertNotDeleted(ctx, t, c, "low-b0", 3*time.Second)
	for _, name := range []string{"urgent-0", "urgent-1"} {
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", name, 0)
	}
}

// startGangPreemptionCluster starts a control plane with the PodGroup CRD,
// node-a and node-b of two A100s each, the priority classes, and gpusched
// with the gang configuration.
func startGangPreemptionCluster(ctx context.Context, t *testing.T) (*testcluster.Cluster, dynamic.Interface) {
	t.Helper()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	for _, name := range []string{"node-a", "node-b"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD(a100, 2, 81920).Obj())
	}
	createPriorityClasses(ctx, t, c)
	startGangSched(ctx, t, c, gangConfig(t))
	return c, dyn
}
