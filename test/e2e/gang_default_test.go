package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGangsUnderTheDefaultProfile: the profile every user names
// (schedulerName: gpusched, examples/gpusched-config.yaml) places PodGroup
// gangs whole. On four 8-GPU nodes (32 GPUs):
//   - started before the PodGroup CRD exists, it places other pods at once
//     and refuses a gang pod, saying the CRD is missing;
//   - once the CRD is installed, a gang of 5 × 8 GPUs, which can never run,
//     gets no GPU at all (placed one by one, 3 of its pods held 24 GPUs for
//     good), and a gang of 3 × 4 GPUs, whose first pod was refused before
//     the CRD, runs whole;
//   - when the small gang's pods are deleted, its PodGroup's status counts
//     none of them scheduled again.
func TestGangsUnderTheDefaultProfile(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, name := range []string{"n0", "n1", "n2", "n3"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD(a100, 8, 81920).Obj())
	}
	cfg := replaceOnce(t, replaceOnce(t, exampleConfig(t), "scheduleTimeoutSeconds: 60", "scheduleTimeoutSeconds: 3"), "backoffSeconds: 10", "backoffSeconds: 1")
	c.StartScheduler(ctx, t, cfg, plugins.CommandOptions()...)

	createPod(ctx, t, c, gangPod("solo", "", 2))
	assignmentOf(ctx, t, c, "solo")
	createPod(ctx, t, c, gangPod("small-0", "small", 4))
	waitForEventWith(ctx, t, c, "small-0", "label scheduling.x-k8s.io/pod-group names PodGroup default/small, and the API server serves no PodGroups",
		"install the PodGroup CRD (deploy/crds)")

	dyn := installPodGroupCRD(ctx, t, c)
	createPodGroup(ctx, t, dyn, "big", 5, 0)
	createPodGroup(ctx, t, dyn, "small", 3, 0)
	for _, name := range []string{"big-0", "big-1", "big-2", "big-3", "big-4"} {
		createPod(ctx, t, c, gangPod(name, "big", 8))
	}
	createPod(ctx, t, c, gangPod("small-1", "small", 4))
	createPod(ctx, t, c, gangPod("small-2", "small", 4))
	for _, name := range []string{"small-0", "small-1", "small-2"} {
		assignmentOf(ctx, t, c, name)
	}
	// The big gang needs 40 GPUs of 32: refused before any pod is reserved.
	containsAll(t, "GangTooLarge event", waitForPodGroupEvent(ctx, t, c, "big", "GangTooLarge"), "gang default/big")
	for _, name := range []string{"big-0", "big-1", "big-2", "big-3", "big-4"} {
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", name, time.Second)
	}
	assertNoGPUGivenTwice(ctx, t, c)
	waitForPodGroupStatus(ctx, t, dyn, "small", "Scheduled with 3 pods", func(s podgroup.Status) bool {
		return s.Phase == podgroup.PhaseScheduled && s.Scheduled == 3
	})
	if s := getPodGroup(ctx, t, dyn, "big").Status; s.Scheduled != 0 {
		t.Errorf("big: %d pods scheduled, want none", s.Scheduled)
	}

	zero := int64(0)
	for _, name := range []string{"small-0", "small-1", "small-2"} {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	waitForPodGroupStatus(ctx, t, dyn, "small", "back to no pod scheduled", func(s podgroup.Status) bool {
		return s.Scheduled == 0 && s.Running == 0 && s.Phase == podgroup.PhasePending
	})
}
