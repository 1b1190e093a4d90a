package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestDefragmenterMakesRoomForAGang: three nodes of 4 A100s hold the four
// replicas of Deployment "infer" (shares of 600 milli-GPU, one per GPU,
// opted in to moving). Gang "train" (PodGroup, minMember 2) asks for two
// pods of 4 GPUs: 8 of the 12 GPUs are free, but at most one node has 4.
//
//   - DryRun says, on each of the gang's pods, that moving 2 replicas makes
//     room for both at once, and changes nothing; kubectl gpusched explain
//     says the same.
//   - Enforce moves the replicas, both pods of the gang bind on the GPUs
//     the plan reserved for them, the replacements on theirs, every
//     replica runs again, no GPU is given twice, and the plan releases
//     every reservation.
//
// Two layouts:
//
//   - two replicas on node-a, one on node-b, one on node-c: the fewest
//     moves empty node-b and node-c, their replicas going to node-a;
//   - two on node-a, two on node-b: one pod of the gang fits node-c as it
//     is, and the other gets node-a, its replicas going to node-b. The
//     scheduler keeps trying the gang (one pod reserved on node-c waits
//     for the other, which finds no node, and the gang is released), and
//     leaves a nominated node on its pods, which is not preemption: the
//     defragmenter plans for it all the same.
func TestDefragmenterMakesRoomForAGang(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layout  []string // the node each replica goes to, in order
		gangOn  []string
		movedTo string
	}{
		{"two nodes made room on", []string{"node-a", "node-a", "node-b", "node-c"}, []string{"node-b", "node-c"}, "node-a"},
		{"one pod fits as it is", []string{"node-a", "node-a", "node-b", "node-b"}, []string{"node-a", "node-c"}, "node-b"},
	} {
		t.Run(tc.name, func(t *testing.T) { testDefragmenterGang(t, tc.layout, tc.gangOn, tc.movedTo) })
	}
}

func testDefragmenterGang(t *testing.T, layout, gangOn []string, movedTo string) {
	ctx := context.Background()
	c := testcluster.StartWithControllers(t)
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD(a100, 4, 81920).Obj())
	}
	dyn := installPodGroupCRD(ctx, t, c)
	startGPUSched(ctx, t, c)

	// The replicas one by one, each with every other node cordoned.
	for i, on := range layout {
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			setCordoned(ctx, t, c, n, n != on)
		}
		if i == 0 {
			createInferDeployment(ctx, t, c, 1)
		} else {
			scaleInfer(ctx, t, c, int32(i+1))
		}
		waitForReplicasSettled(ctx, t, c, i+1)
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		setCordoned(ctx, t, c, n, false)
	}
	before := replicaUIDs(ctx, t, c)
	want, got := map[string]int{}, map[string]int{}
	for _, n := range layout {
		want[n]++
	}
	for _, p := range inferPods(ctx, t, c) {
		got[p.Spec.NodeName]++
	}
	if !maps.Equal(got, want) {
		t.Fatalf("replicas by node %v, want %v", got, want)
	}

	createPodGroup(ctx, t, dyn, "train", 2, 0)
	for i := range 2 {
		createPod(ctx, t, c, gangPod(fmt.Sprintf("train-%d", i), "train", 4))
	}
	for i := range 2 {
		testcluster.WaitForPodEvent(ctx, t, c.Client, "default", fmt.Sprintf("train-%d", i), "FailedScheduling", timeout)
	}

	const planned = "moving 2 pod(s) makes room for gang default/train, the 2 pods it needs at once"
	dry := startDefragmenter(ctx, t, c, defrag.DryRun)
	msg := waitForDefragEventOn(ctx, t, c, dry, "train-0", "WouldMakeRoom", planned)
	t.Logf("DryRun: %s", msg)
	waitForDefragEventOn(ctx, t, c, dry, "train-1", "WouldMakeRoom", planned)
	assertUnchanged(ctx, t, c, before, "in DryRun")
	expectOutput(t, kubectlGPUSched(ctx, t, c, "explain", "train-1"),
		"Migration: the defragmenter (gpusched defragment) would make room: "+planned)

	enforce := startDefragmenter(ctx, t, c, defrag.Enforce)
	msg = waitForDefragEventOn(ctx, t, c, enforce, "train-0", "MakingRoom", planned)
	t.Logf("Enforce: %s", msg)
	reserved := nodeReservations(ctx, t, c)
	forPod := map[string]gpu.Reservation{}
	var forReplicas []string
	for _, r := range reserved {
		if r.Pod != "" {
			forPod[string(r.Pod)] = r
		} else {
			forReplicas = append(forReplicas, fmt.Sprintf("%s%v", r.Assignment.Node, r.Assignment.Devices))
		}
	}
	if len(forPod) != 2 || len(forReplicas) != 2 {
		t.Fatalf("reservations %v; want one per pod of the gang and one per moved replica", reserved)
	}
	var gangNodes []string
	for i := range 2 {
		pod := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", fmt.Sprintf("train-%d", i), timeout)
		r, ok := forPod[string(pod.UID)]
		if got, _ := gpu.AssignmentOf(pod); !ok || got.String() != r.Assignment.String() {
			t.Errorf("%s got %s, its plan reserved %s", pod.Name, got.String(), r.GPUs)
		}
		gangNodes = append(gangNodes, pod.Spec.NodeName)
	}
	slices.Sort(gangNodes)
	if !slices.Equal(gangNodes, gangOn) {
		t.Errorf("the gang runs on %v, want %v", gangNodes, gangOn)
	}
	var placed []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		placed = placed[:0]
		for _, p := range inferPods(ctx, t, c) {
			if a, ok := gpu.AssignmentOf(&p); ok && !before[p.UID] {
				placed = append(placed, fmt.Sprintf("%s%v", a.Node, a.Devices))
			}
		}
		return len(placed) == 2, nil
	})
	if err != nil {
		t.Fatalf("replacements bound: %v; want 2", placed)
	}
	slices.Sort(placed)
	slices.Sort(forReplicas)
	if !slices.Equal(placed, forReplicas) || !strings.HasPrefix(placed[0], movedTo) || !strings.HasPrefix(placed[1], movedTo) {
		t.Errorf("replacements bound on %v, the plan reserved %v (%s's free GPUs)", placed, forReplicas, movedTo)
	}
	for i := range 2 {
		waitForDefragEventOn(ctx, t, c, enforce, fmt.Sprintf("train-%d", i), "MigrationDone", "done; this pod and the pods moved for it are bound")
	}
	if left := nodeReservations(ctx, t, c); len(left) != 0 {
		t.Errorf("reservations left after the plan: %v", left)
	}
	waitForReplicasBound(ctx, t, c, 4)
	kept := 0
	for _, p := range inferPods(ctx, t, c) {
		if before[p.UID] {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("%d replicas kept their pod, want 2 (2 moved)", kept)
	}
	assertNoGPUGivenTwice(ctx, t, c)
	if pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
				t.Errorf("pod %s still pending (%v)", p.Name, podCondition(&p))
			}
		}
	}
}

// waitForReplicasSettled waits until infer has exactly n pods, all bound,
// in two reads a second apart: the ReplicaSet controller, reading a cache
// behind its writes, may create a replica too many for a moment, which
// must not be left to land on a node uncordoned next.
func waitForReplicasSettled(ctx context.Context, t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	settled := func() bool {
		pods, bound := inferPods(ctx, t, c), 0
		for _, p := range pods {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				bound++
			}
		}
		return len(pods) == n && bound == n
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !settled() {
			return false, nil
		}
		time.Sleep(time.Second)
		return settled(), nil
	})
	if err != nil {
		t.Fatalf("infer did not settle on %d bound replicas", n)
	}
}

// podCondition is a pod's PodScheduled condition in words.
func podCondition(p *v1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no PodScheduled condition"
}
