package e2e

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/gpusched/gpusched/test/testcluster"
)

// TestChaosAPIServerRestarted restarts the API server while a burst of 120
// GPU pods (40 whole GPUs and 80 shares of 200 milli-GPU, 56 GPUs asked of
// 20) is being scheduled, once 10 of its first 20 pods are bound: every connection
// is cut, requests are refused for the few seconds the new API server takes
// to start, and it comes back on the same etcd at the same address. The
// scheduler must not stop, must go on binding the pods created before and
// after the restart, leave a reason on every pod that does not fit, and
// never give a GPU beyond its capacity.
//
// Both properties failed before the product handled the restart: binds cut
// mid-request were written with their answers lost, and the GPUs released
// at once went to other pods (one GPU held 1200 milli-GPU); and reasons
// whose write failed were never written again.
func TestChaosAPIServerRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, sched := startChaosClusterOn(ctx, t, testcluster.StartWithFaults(t))

	burst := chaosBurst(40, 80)
	for _, p := range burst[:20] { // 12 GPUs' worth: room is left
		createPod(ctx, t, c, p)
	}
	boundBefore := waitForBound(ctx, t, c, 10)

	outage := watchOutage(ctx, t, c)
	c.RestartAPIServer()
	refused := outage()
	if refused == 0 {
		t.Fatal("no request failed while the API server restarted: the restart did not happen")
	}
	t.Logf("API server restarted with %d pods bound; %d requests failed meanwhile", boundBefore, refused)

	for _, p := range burst[20:] {
		createPodRetrying(ctx, t, c, p)
	}
	bound, pending := waitForSettledBurst(ctx, t, c, 90*time.Second)
	t.Logf("after the restart: %d pods bound, %d pending with a reason", bound, pending)
	if bound <= boundBefore {
		t.Errorf("%d pods bound after the restart, %d before: scheduling did not resume", bound, boundBefore)
	}
	select {
	case <-sched.Done():
		t.Fatal("the scheduler stopped")
	default:
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestChaosEtcdSlow delays every request from the API server to etcd by
// 100 ms, and for five seconds in the middle by 2 s, while a burst of 45
// GPU pods (15 whole GPUs and 30 shares, 21 GPUs asked of 20) is being
// scheduled. A pod create must take at least the delay (the proxy is in
// the path); every pod must still bind or stay pending with a reason, and
// no GPU may be given twice.
func TestChaosEtcdSlow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, sched := startChaosClusterOn(ctx, t, testcluster.StartWithFaults(t))

	const delay = 100 * time.Millisecond
	c.SetEtcdDelay(delay)
	burst := chaosBurst(15, 30)
	start := time.Now()
	createPod(ctx, t, c, burst[0])
	if took := time.Since(start); took < delay {
		t.Fatalf("a pod create took %v with etcd delayed by %v: the delay is not in the path", took, delay)
	}
	for i, p := range burst[1:] {
		if i == len(burst)/2 {
			c.SetEtcdDelay(2 * time.Second)
			time.AfterFunc(5*time.Second, func() { c.SetEtcdDelay(delay) })
		}
		createPodRetrying(ctx, t, c, p)
	}
	bound, pending := waitForSettledBurst(ctx, t, c, 2*time.Minute)
	t.Logf("etcd delayed: %d pods bound, %d pending with a reason, %v after the first create", bound, pending, time.Since(start).Round(time.Millisecond))
	if bound == 0 {
		t.Fatal("no pod bound")
	}
	select {
	case <-sched.Done():
		t.Fatal("the scheduler stopped")
	default:
	}
	c.SetEtcdDelay(0)
	assertNoGPUGivenTwice(ctx, t, c)
}

// waitForBound waits until at least n pods of "default" are bound and
// returns how many are.
func waitForBound(ctx context.Context, t *testing.T, c *testcluster.Cluster, n int) int {
	t.Helper()
	bound := 0
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound = 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound >= n, nil
	})
	if err != nil {
		t.Fatalf("%d pods bound, want %d: %v", bound, n, err)
	}
	return bound
}

// watchOutage polls the API server's /readyz every 20 ms, once each,
// without client-go's retries, until the returned function is called,
// which returns how many polls failed.
func watchOutage(ctx context.Context, t *testing.T, c *testcluster.Cluster) func() int {
	t.Helper()
	client, err := rest.HTTPClientFor(c.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = time.Second
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RestConfig.Host+"/readyz", nil)
			if err != nil {
				failed.Add(1)
				continue
			}
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
		}
	})
	return func() int {
		close(stop)
		wg.Wait()
		return int(failed.Load())
	}
}

// createPodRetrying creates the pod like createPod, retrying for up to 30 s
// while the API server cannot be reached or is too slow to answer.
func createPodRetrying(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod *v1.Pod) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.UID = ""
	pod.Spec.SchedulerName = schedulerName
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(last) { // an earlier try went through
			return true, nil
		}
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("creating pod %s: %v (last error: %v)", pod.Name, err, last)
	}
}
