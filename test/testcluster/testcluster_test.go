package testcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/test/testcluster"
)

const defaultSchedulerConfig = `
profiles:
- schedulerName: default-scheduler
`

// TestHarness proves the harness end to end: a real API server, a node made
// schedulable through CreateNode, the default kube-scheduler binding a pod,
// no binding while the scheduler is stopped, and a restarted scheduler
// picking up the pending pod.
func TestHarness(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c := testcluster.Start(t)
	t.Logf("control plane up after %v", time.Since(start))

	node := testcluster.CreateNode(ctx, t, c.Client, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: v1.NodeStatus{
			Allocatable: v1.ResourceList{
				v1.ResourceCPU:    resource.MustParse("4"),
				v1.ResourceMemory: resource.MustParse("8Gi"),
				v1.ResourcePods:   resource.MustParse("110"),
			},
		},
	})
	if got := node.Status.Capacity.Cpu().String(); got != "4" {
		t.Fatalf("node capacity cpu = %s, want 4 (copied from allocatable)", got)
	}
	if len(node.Spec.Taints) != 0 {
		t.Fatalf("node has taints %v; TaintNodesByCondition should be disabled", node.Spec.Taints)
	}

	sched := c.StartScheduler(ctx, t, defaultSchedulerConfig)
	t.Logf("scheduler 1 synced after %v", time.Since(start))

	createPod(ctx, t, c, "pod-1")
	p := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", "pod-1", 30*time.Second)
	if p.Spec.NodeName != "node-1" {
		t.Fatalf("pod-1 bound to %q, want node-1", p.Spec.NodeName)
	}
	ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "pod-1", "Scheduled", 10*time.Second)
	if !strings.Contains(ev.Message, "node-1") {
		t.Errorf("Scheduled event message %q does not mention node-1", ev.Message)
	}

	sched.Stop()
	sched.Stop() // idempotent
	createPod(ctx, t, c, "pod-2")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "pod-2", 3*time.Second)

	c.StartScheduler(ctx, t, defaultSchedulerConfig)
	p = testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", "pod-2", 30*time.Second)
	if p.Spec.NodeName != "node-1" {
		t.Fatalf("pod-2 bound to %q, want node-1", p.Spec.NodeName)
	}

	// A pod nothing can fit produces a FailedScheduling event.
	big := newPod("too-big")
	big.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("64")}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	ev = testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "too-big", "FailedScheduling", 30*time.Second)
	if !strings.Contains(ev.Message, "Insufficient cpu") {
		t.Errorf("FailedScheduling message %q does not mention Insufficient cpu", ev.Message)
	}
	t.Logf("test body done after %v", time.Since(start))
}

func newPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func createPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, newPod(name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}
