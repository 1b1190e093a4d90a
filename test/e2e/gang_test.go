package e2e

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

// rackNodes are four 4-GPU nodes: a0 and a1 share NVLink clique c1, b0 has
// clique c2, all three in rack r1; c0 is alone in rack r2.
func createRackNodes(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	for _, n := range []*gt.NodeWrapper{
		gt.MakeGPUNode("a0").GFD(a100, 4, 81920).Clique("c1").Label(rackLabel, "r1"),
		gt.MakeGPUNode("a1").GFD(a100, 4, 81920).Clique("c1").Label(rackLabel, "r1"),
		gt.MakeGPUNode("b0").GFD(a100, 4, 81920).Clique("c2").Label(rackLabel, "r1"),
		gt.MakeGPUNode("c0").GFD(a100, 4, 81920).Clique("c3").Label(rackLabel, "r2"),
	} {
		testcluster.CreateNode(ctx, t, c.Client, n.Obj())
	}
}

// TestGangFits: a gang that fits is placed all together, on one NVLink
// clique; its PodGroup records the phase, the scheduled count and an event;
// a gang with fewer pods than minMember waits for the rest, then runs.
func TestGangFits(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createRackNodes(ctx, t, c)
	startGangSched(ctx, t, c, gangConfig(t))

	// Two pods of 4 GPUs: the clique c1 (a0, a1) is the only one that holds 8.
	createPodGroup(ctx, t, dyn, "train", 2, 0)
	createPod(ctx, t, c, gangPod("train-0", "train", 4))
	createPod(ctx, t, c, gangPod("train-1", "train", 4))
	nodes := map[string]bool{assignmentOf(ctx, t, c, "train-0").Node: true, assignmentOf(ctx, t, c, "train-1").Node: true}
	if !nodes["a0"] || !nodes["a1"] {
		t.Errorf("gang on %v, want both nodes of clique c1 (a0, a1)", nodes)
	}
	waitForPodGroupStatus(ctx, t, dyn, "train", "Scheduled with 2 pods", func(s podgroup.Status) bool {
		return s.Phase == podgroup.PhaseScheduled && s.Scheduled == 2 && s.ScheduleStartTime != nil
	})
	containsAll(t, "event", waitForPodGroupEvent(ctx, t, c, "train", "Scheduled"), "2 pods of 2 needed are reserved or bound")

	// Three pods of 2 GPUs, one created late: nothing binds before it exists.
	createPodGroup(ctx, t, dyn, "late", 3, 0)
	createPod(ctx, t, c, gangPod("late-0", "late", 2))
	createPod(ctx, t, c, gangPod("late-1", "late", 2))
	// The event may follow one saying that the PodGroup does not exist yet
	// (the scheduler's cache of PodGroups lags their creation). The status
	// is written before the pod is refused for missing members, so it says
	// Pending as soon as that refusal is reported (docs/gang.md, Status).
	waitForEventWith(ctx, t, c, "late-1", "gang default/late has 2 of the 3 pods its spec.minMember asks for")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "late-1", 0)
	if s := getPodGroup(ctx, t, dyn, "late").Status; s.Phase != podgroup.PhasePending {
		t.Errorf("late: phase %q with 2 of 3 pods, want Pending", s.Phase)
	}
	createPod(ctx, t, c, gangPod("late-2", "late", 2))
	late := map[string]int{}
	for _, name := range []string{"late-0", "late-1", "late-2"} {
		late[assignmentOf(ctx, t, c, name).Node]++
	}
	// c1 is full; b0 and c0 have 4 GPUs each. The first pod goes to either;
	// the second follows it to the same node (same clique and rack: 100
	// against 0 or 33), and the third takes the other node.
	if len(late) != 2 || (late["b0"] != 2 && late["c0"] != 2) {
		t.Errorf("late gang on %v, want two pods on b0 or c0 and one on the other", late)
	}

	// A gang whose second pod is held back by a scheduling gate: the first
	// waits at Permit for 2 s, times out, gives its GPU back and retries;
	// once the gate is lifted the gang completes.
	createPodGroup(ctx, t, dyn, "slow", 2, 2)
	createPod(ctx, t, c, gangPod("slow-0", "slow", 1))
	gated := gangPod("slow-1", "slow", 1)
	gated.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "example.com/hold"}}
	createPod(ctx, t, c, gated)
	containsAll(t, "PodGroup event", waitForPodGroupEvent(ctx, t, c, "slow", "GangReleased"),
		"timed out after 2s with 1 of 2 pods reserved or bound", "released 0 reserved pods")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "slow-0", 0)
	ungate(ctx, t, c, "slow-1")
	assignmentOf(ctx, t, c, "slow-0")
	assignmentOf(ctx, t, c, "slow-1")
	assertNoGPUGivenTwice(ctx, t, c)
}
