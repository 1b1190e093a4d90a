package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGangRejections: a gang larger than the cluster is refused with the
// reason and holds nothing; a malformed pod-group label and a missing
// PodGroup are reported on the pod, and the pod schedules once its PodGroup
// appears.
func TestGangRejections(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createRackNodes(ctx, t, c) // 16 GPUs
	startGangSched(ctx, t, c, gangConfig(t))

	t.Run("larger than the cluster", func(t *testing.T) {
		createPodGroup(ctx, t, dyn, "huge", 5, 0)
		for i := range 5 {
			createPod(ctx, t, c, gangPod(fmt.Sprintf("huge-%d", i), "huge", 4))
		}
		waitForEventWith(ctx, t, c, "huge-4", "gang default/huge: gang needs 5 pods placed together but even with every GPU free only 4 fit",
			"the gang asks for 20 GPUs, the cluster has 16 GPUs")
		containsAll(t, "PodGroup event", waitForPodGroupEvent(ctx, t, c, "huge", "GangTooLarge"), "only 4 fit")
		// Nothing is held: four single pods take all 16 GPUs.
		for i := range 4 {
			createPod(ctx, t, c, gangPod(fmt.Sprintf("single-%d", i), "", 4))
		}
		for i := range 4 {
			assignmentOf(ctx, t, c, fmt.Sprintf("single-%d", i))
		}
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "huge-0", 0)
	})

	t.Run("malformed label", func(t *testing.T) {
		createPod(ctx, t, c, gangPod("bad-label", "Not_A_Name", 1))
		ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "bad-label", "FailedScheduling", timeout)
		containsAll(t, "event", ev.Message, `label scheduling.x-k8s.io/pod-group: value "Not_A_Name" is not a PodGroup name`)
	})

	t.Run("missing PodGroup", func(t *testing.T) {
		deletePods(ctx, t, c, "single-0") // 4 GPUs free on one node
		createPod(ctx, t, c, gangPod("orphan-0", "later", 2))
		createPod(ctx, t, c, gangPod("orphan-1", "later", 2))
		waitForEventWith(ctx, t, c, "orphan-0", "label scheduling.x-k8s.io/pod-group names PodGroup default/later, which does not exist")
		createPodGroup(ctx, t, dyn, "later", 2, 0)
		assignmentOf(ctx, t, c, "orphan-0")
		assignmentOf(ctx, t, c, "orphan-1")
		waitForPodGroupStatus(ctx, t, dyn, "later", "Scheduled", func(s podgroup.Status) bool { return s.Phase == podgroup.PhaseScheduled })
	})
	assertNoGPUGivenTwice(ctx, t, c)
}
