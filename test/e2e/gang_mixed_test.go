package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// createCliqueNodes creates n 4-GPU nodes, all in one clique and rack.
func createCliqueNodes(ctx context.Context, t *testing.T, c *testcluster.Cluster, n int) {
	for i := range n {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(fmt.Sprintf("n%d", i)).GFD(a100, 4, 81920).Clique("c1").Label(rackLabel, "r1").Obj())
	}
}

// TestGangMixedWithSinglePods: single GPU pods and a gang, submitted
// interleaved, all run; a gang that cannot fit in what is left holds nothing
// while it waits, single pods keep scheduling beside it, and it runs once the
// others finish.
func TestGangMixedWithSinglePods(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createCliqueNodes(ctx, t, c, 3) // 12 GPUs
	startGangSched(ctx, t, c, gangConfig(t))

	// Interleaved: a gang of three 2-GPU pods and three 1-GPU single pods.
	createPodGroup(ctx, t, dyn, "small", 3, 2)
	for i := range 3 {
		createPod(ctx, t, c, gangPod(fmt.Sprintf("small-%d", i), "small", 2))
		createPod(ctx, t, c, gangPod(fmt.Sprintf("single-%d", i), "", 1))
	}
	for i := range 3 {
		assignmentOf(ctx, t, c, fmt.Sprintf("single-%d", i))
		assignmentOf(ctx, t, c, fmt.Sprintf("small-%d", i))
	}

	// 9 GPUs are taken: a gang of three 4-GPU pods cannot have any pod bound.
	createPodGroup(ctx, t, dyn, "big", 3, 2)
	for i := range 3 {
		createPod(ctx, t, c, gangPod(fmt.Sprintf("big-%d", i), "big", 4))
	}
	waitForPodGroupEvent(ctx, t, c, "big", "GangReleased")
	// A single pod still finds one of the 3 free GPUs while big waits.
	createPod(ctx, t, c, gangPod("single-late", "", 1))
	assignmentOf(ctx, t, c, "single-late")
	for range 20 {
		bound, err := boundPods(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, ok := bound[fmt.Sprintf("big-%d", i)]; ok {
				t.Fatalf("big-%d bound with 10 of 12 GPUs taken", i)
			}
		}
		time.Sleep(testcluster.PollInterval)
	}

	// The others finish; big takes the whole cluster.
	deletePods(ctx, t, c, "single-0", "single-1", "single-2", "single-late", "small-0", "small-1", "small-2")
	for i := range 3 {
		assignmentOf(ctx, t, c, fmt.Sprintf("big-%d", i))
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestGangSchedulerRestart stops the scheduler while two pods of a gang of
// three wait at Permit holding GPUs (the third is held back by a scheduling
// gate), ungates the third, and starts a new scheduler: the gang completes,
// and the GPUs the first scheduler reserved are not given twice.
func TestGangSchedulerRestart(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createCliqueNodes(ctx, t, c, 2) // 8 GPUs
	cfg := gangConfig(t)
	first := startGangSched(ctx, t, c, cfg)

	createPodGroup(ctx, t, dyn, "rs", 3, 60)
	createPod(ctx, t, c, gangPod("rs-0", "rs", 2))
	createPod(ctx, t, c, gangPod("rs-1", "rs", 2))
	gated := gangPod("rs-2", "rs", 2)
	gated.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "example.com/hold"}}
	createPod(ctx, t, c, gated)

	profile := first.Sched.Profiles[schedulerName]
	waiting := func() int {
		n := 0
		profile.IterateOverWaitingPods(func(fwk.WaitingPod) { n++ })
		return n
	}
	if !waitUntil(ctx, timeout, func() bool { return waiting() == 2 }) {
		evs, _ := c.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		for _, ev := range evs.Items {
			t.Logf("event %s %s: %s", ev.Regarding.Name, ev.Reason, ev.Note)
		}
		t.Fatalf("%d pods wait at Permit, want 2", waiting())
	}
	first.Stop()
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "rs-0", 0)
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "rs-1", 0)

	ungate(ctx, t, c, "rs-2")
	startGangSched(ctx, t, c, cfg)
	for _, name := range []string{"rs-0", "rs-1", "rs-2"} {
		assignmentOf(ctx, t, c, name)
	}
	// Exactly 2 GPUs are left: a 2-GPU pod binds, a 1-GPU pod then does not.
	createPod(ctx, t, c, gangPod("rest", "", 2))
	assignmentOf(ctx, t, c, "rest")
	createPod(ctx, t, c, gangPod("none", "", 1))
	waitForEventWith(ctx, t, c, "none", "insufficient free GPUs")
	assertNoGPUGivenTwice(ctx, t, c)
}

// ungate removes the scheduling gates of a pod.
func ungate(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.SchedulingGates = nil
	if _, err := c.Client.CoreV1().Pods("default").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("removing the scheduling gates of %s: %v", name, err)
	}
}
