package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestPreemptChurn: three 4-GPU nodes filled by random low-priority pods
// (whole GPUs, one or two, and shares of 250 or 500 milli-GPU), then random
// urgent pods that can only run by preempting. A stand-in for the kubelet
// finishes every deletion at once, so freed GPUs are contested by the
// urgent pods and by the low-priority pods still pending. Throughout, every
// GPU's assignments, summed over all bound pods, stay within the GPU; in the
// end every urgent pod is bound, none was evicted, and low-priority pods
// were (the urgent pods did preempt). Three seeds, three clusters.
func TestPreemptChurn(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { preemptChurn(t, seed) })
	}
}

func preemptChurn(t *testing.T, seed uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testcluster.Start(t)
	for i := range 3 {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(fmt.Sprintf("a100-%d", i)).GFD(a100, 4, 81920).Obj())
	}
	createPriorityClasses(ctx, t, c)
	startGPUSched(ctx, t, c)

	rng := rand.New(rand.NewPCG(seed, 5))
	shape := func(name string) *gt.PodWrapper {
		switch rng.IntN(4) {
		case 0:
			return gt.MakeGPUPod(name).GPUs(1)
		case 1:
			return gt.MakeGPUPod(name).GPUs(2)
		case 2:
			return gt.MakeGPUPod(name).Milli(250)
		default:
			return gt.MakeGPUPod(name).Milli(500)
		}
	}
	for i := range 24 {
		createPod(ctx, t, c, withPriorityClass(shape(fmt.Sprintf("low-%d", i)), "gpu-low").Obj())
	}
	// Let the low-priority pods take the GPUs first.
	waitForQuiet(ctx, t, c, 24)

	var mu sync.Mutex
	var violations []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the kubelet stand-in and the invariant check
		defer wg.Done()
		zero := int64(0)
		for ctx.Err() == nil {
			pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			if v := overAllocated(pods.Items); v != "" {
				mu.Lock()
				violations = append(violations, v)
				mu.Unlock()
			}
			for _, pod := range pods.Items {
				if pod.DeletionTimestamp != nil {
					_ = c.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	var urgent []string
	for i := range 8 {
		name := fmt.Sprintf("urgent-%d", i)
		urgent = append(urgent, name)
		createPod(ctx, t, c, withPriorityClass(shape(name), "gpu-urgent").Obj())
	}
	for _, name := range urgent {
		testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", name, 2*timeout)
	}
	cancel()
	wg.Wait()
	ctx = context.Background()
	for _, name := range urgent {
		assertNotDeleted(ctx, t, c, name, 0)
	}
	for _, v := range violations {
		t.Error(v)
	}
	assertNoGPUGivenTwice(ctx, t, c)
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if evicted := 24 + len(urgent) - len(pods.Items); evicted == 0 {
		t.Error("no low-priority pod was evicted: the urgent pods did not need to preempt")
	} else {
		t.Logf("%d low-priority pods evicted for %d urgent pods", evicted, len(urgent))
	}
}

// waitForQuiet waits until each of the n pods created so far is bound or
// has been refused at least once.
func waitForQuiet(ctx context.Context, t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) < n {
			return false, nil
		}
		for _, pod := range pods.Items {
			tried := pod.Spec.NodeName != ""
			for _, cond := range pod.Status.Conditions {
				tried = tried || cond.Type == "PodScheduled"
			}
			if !tried {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods not all tried within %v", timeout)
	}
}
