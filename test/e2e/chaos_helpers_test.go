package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// chaosBurst is the burst every chaos test creates: whole-GPU pods
// ("whole-N", one GPU each) interleaved with 200 milli-GPU shares
// ("share-N"). 200 divides 1000, so a share fits on any GPU with at most 800
// milli-GPU in use.
func chaosBurst(whole, shares int) []*v1.Pod {
	var pods []*v1.Pod
	for i := 0; i < whole || i < shares; i++ {
		if i < shares {
			pods = append(pods, gt.MakeGPUPod(fmt.Sprintf("share-%d", i)).Milli(200).Obj())
		}
		if i < whole {
			pods = append(pods, gt.MakeGPUPod(fmt.Sprintf("whole-%d", i)).GPUs(1).Obj())
		}
	}
	return pods
}

// waitForSettledBurst polls until every GPU pod is either bound or pending
// for a reason that still holds: a pending pod must carry PodScheduled=False
// and must not fit on any live node given what is bound there (a whole-GPU
// pod needs a GPU with nothing in use, a share one with room for its
// milli-GPU). It fails the test with the last unsettled pod after timeout.
func waitForSettledBurst(ctx context.Context, t *testing.T, c *testcluster.Cluster, timeout time.Duration) (bound, pending int) {
	t.Helper()
	var why string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		w, b, p := settled(ctx, c)
		if ctx.Err() != nil { // keep the last reason the cluster gave
			return false, nil
		}
		why, bound, pending = w, b, p
		return why == "", nil
	})
	if err != nil {
		t.Fatalf("burst not settled within %v: %s", timeout, why)
	}
	return bound, pending
}

// settled returns why the burst has not settled ("" once it has) and how
// many pods are bound and pending.
func settled(ctx context.Context, c *testcluster.Cluster) (why string, bound, pending int) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error(), 0, 0
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error(), 0, 0
	}
	used := map[string][]int64{} // node name -> milli-GPU in use per GPU
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[gpu.ResourceGPU]
		used[n.Name] = make([]int64, q.Value())
	}
	for i := range pods.Items {
		if a, ok := gpu.AssignmentOf(&pods.Items[i]); ok && used[a.Node] != nil {
			for _, d := range a.Devices {
				if d >= 0 && d < len(used[a.Node]) {
					used[a.Node][d] += a.Milli
				}
			}
		}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" {
			bound++
			continue
		}
		pending++
		if !hasUnschedulableCondition(p) {
			return fmt.Sprintf("pod %s pending without PodScheduled=False", p.Name), bound, pending
		}
		need := int64(gpu.MilliPerGPU)
		if p.Annotations[gpu.AnnotationMilli] != "" {
			need = 200
		}
		for node, gpus := range used {
			for d, u := range gpus {
				if u+need <= gpu.MilliPerGPU {
					return fmt.Sprintf("pod %s pending but GPU %d of node %s has %d milli-GPU free", p.Name, d, node, gpu.MilliPerGPU-u), bound, pending
				}
			}
		}
	}
	return "", bound, pending
}

func hasUnschedulableCondition(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message != "" {
			return true
		}
	}
	return false
}

// startChaosCluster starts a control plane with gpuNodes and the gpusched
// scheduler (example configuration).
func startChaosCluster(ctx context.Context, t *testing.T) *testcluster.Cluster {
	t.Helper()
	c, _ := startChaosClusterOn(ctx, t, testcluster.Start(t))
	return c
}

// startChaosClusterOn adds gpuNodes and the gpusched scheduler (example
// configuration) to the cluster c.
func startChaosClusterOn(ctx context.Context, t *testing.T, c *testcluster.Cluster) (*testcluster.Cluster, *testcluster.Scheduler) {
	t.Helper()
	for _, n := range gpuNodes() {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	return c, startGPUSched(ctx, t, c)
}
