package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGangWorkloadAPI runs gpusched with examples/gpusched-workload-config.yaml
// on an API server serving the upstream Workload API: upstream's
// GangScheduling places a PodGroup's GPU pods all together, each with its
// GPU assignment from GPUPlacement, and binds none of a gang that is short
// of pods or of GPUs.
func TestGangWorkloadAPI(t *testing.T) {
	ctx := context.Background()
	// The feature gate is process-wide here: the in-process scheduler
	// sees it too, as gpusched would with --feature-gates=GenericWorkload=true.
	c := testcluster.Start(t, "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true")
	createCliqueNodes(ctx, t, c, 2) // 8 GPUs
	c.StartScheduler(ctx, t, string(readRepoFile(t, "examples", "gpusched-workload-config.yaml")),
		plugins.CommandOptions()...)

	// Three pods of 2 GPUs.
	createWorkloadGang(ctx, t, c, "fits", 3, 3, 2)
	for i := range 3 {
		assignmentOf(ctx, t, c, fmt.Sprintf("fits-%d", i))
	}
	assertNoGPUGivenTwice(ctx, t, c)

	// Two GPUs are left: two pods of 2 GPUs each do not both fit, so neither binds.
	createWorkloadGang(ctx, t, c, "short", 2, 2, 2)
	// One pod of a gang of two exists: it does not bind alone.
	createWorkloadGang(ctx, t, c, "alone", 2, 1, 1)
	for range 30 {
		for _, name := range []string{"short-0", "short-1", "alone-0"} {
			testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", name, 0)
		}
		time.Sleep(testcluster.PollInterval)
	}
	// When fits finishes, short fits.
	deletePods(ctx, t, c, "fits-0", "fits-1", "fits-2")
	assignmentOf(ctx, t, c, "short-0")
	assignmentOf(ctx, t, c, "short-1")
	assertNoGPUGivenTwice(ctx, t, c)
}

// createWorkloadGang creates a scheduling.k8s.io/v1beta1 PodGroup with a gang
// policy of minCount, and pods of it asking for gpus GPUs each.
func createWorkloadGang(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, minCount int32, pods, gpus int) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}},
	}
	if _, err := c.Client.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodGroup %s: %v", name, err)
	}
	// The scheduler learns of the PodGroup through its informer; give the
	// API a moment to serve it before its pods arrive.
	_ = wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.SchedulingV1beta1().PodGroups("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	for i := range pods {
		pod := gangPod(fmt.Sprintf("%s-%d", name, i), "", gpus)
		pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
		createPod(ctx, t, c, pod)
	}
}
