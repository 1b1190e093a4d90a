package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/test/testcluster"
)

// bindWatch records when the test first sees each pod of "default" bound,
// from a pod informer: the moment the watch event arrives, a few
// milliseconds after the API server wrote the Binding.
type bindWatch struct {
	mu    sync.Mutex
	bound map[string]time.Time
	times []time.Time // the same moments, in the order seen
}

// watchBinds starts a bindWatch on the cluster; it stops when the test ends.
func watchBinds(ctx context.Context, t *testing.T, c *testcluster.Cluster) *bindWatch {
	t.Helper()
	b := &bindWatch{bound: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace("default"))
	record := func(obj any) {
		if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
			b.record(pod.Name, time.Now())
		}
	}
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return b
}

func (b *bindWatch) record(pod string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, seen := b.bound[pod]; !seen {
		b.bound[pod] = at
		b.times = append(b.times, at)
	}
}

// count is the number of pods seen bound whose names start with prefix.
func (b *bindWatch) count(prefix string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if prefix == "" {
		return len(b.times)
	}
	n := 0
	for pod := range b.bound {
		if strings.HasPrefix(pod, prefix) {
			n++
		}
	}
	return n
}

// firstAfter is the first moment after t at which a pod was seen bound.
func (b *bindWatch) firstAfter(t time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := sort.Search(len(b.times), func(i int) bool { return b.times[i].After(t) })
	if i == len(b.times) {
		return time.Time{}, false
	}
	return b.times[i], true
}

// waitForCount waits until n pods whose names start with prefix are
// bound; it fails the test, naming pods still unbound and why, if no pod
// is bound for stall.
func (b *bindWatch) waitForCount(ctx context.Context, t *testing.T, c *testcluster.Cluster, prefix string, n int, stall time.Duration) {
	t.Helper()
	last, lastChange := b.count(""), time.Now()
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		if b.count(prefix) >= n {
			return true, nil
		}
		if got := b.count(""); got != last {
			last, lastChange = got, time.Now()
		}
		return time.Since(lastChange) > stall, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d pods %s* bound: %v", n, prefix, err)
	}
	if got := b.count(prefix); got < n {
		t.Fatalf("%d pods %s* bound, want %d; no pod bound in the last %v. Unbound:\n%s", got, prefix, n, stall, describeUnbound(ctx, c, 10))
	}
}

// waitForBindAfter waits for the first pod bound after t and returns that
// moment; it fails the test after d.
func (b *bindWatch) waitForBindAfter(ctx context.Context, t *testing.T, c *testcluster.Cluster, after time.Time, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, d, true, func(context.Context) (bool, error) {
		var ok bool
		at, ok = b.firstAfter(after)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no pod bound within %v of the new leader's taking the lease. Unbound:\n%s", d, describeUnbound(ctx, c, 10))
	}
	return at
}

// describeUnbound lists up to n pods of "default" without a node, each with
// its PodScheduled condition.
func describeUnbound(ctx context.Context, c *testcluster.Cluster, n int) string {
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "listing pods: " + err.Error()
	}
	var lines []string
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" {
			continue
		}
		if len(lines) == n {
			lines = append(lines, "...")
			break
		}
		cond := "no PodScheduled condition"
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled {
				cond = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
		lines = append(lines, "  "+pod.Name+": "+cond)
	}
	return strings.Join(lines, "\n")
}

// gpuHolders maps a GPU ("node/index") to the pods holding part of it and
// to the milli-GPU they hold together.
type gpuHolders struct {
	pods  map[string][]string
	milli map[string]int64
}

// checkGPUAllocations reads every node and bound pod from the API server
// and reports each way the pods' gpusched.io/gpu-assigned annotations break
// the nodes' capacity: a GPU pod bound without an assignment, or with one
// for another node or for a GPU the node does not have, and a GPU whose
// holders take more than 1000 milli-GPU together (a whole GPU given to a
// second pod, or shares beyond the GPU), naming the GPU and its pods.
// Every bound pod counts as a GPU pod, as every pod of the failover tests
// is. It returns the number of bound pods it checked.
func checkGPUAllocations(ctx context.Context, c *testcluster.Cluster) (int, []string) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, []string{"listing nodes: " + err.Error()}
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, []string{"listing pods: " + err.Error()}
	}
	gpusOf := map[string]int64{}
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[gpu.ResourceGPU]
		gpusOf[n.Name] = q.Value()
	}
	h := gpuHolders{pods: map[string][]string{}, milli: map[string]int64{}}
	var problems []string
	checked := 0
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == "" {
			continue
		}
		checked++
		raw, ok := pod.Annotations[gpu.AnnotationAssigned]
		if !ok {
			problems = append(problems, fmt.Sprintf("pod %s is bound to %s without a GPU assignment", pod.Name, pod.Spec.NodeName))
			continue
		}
		a, err := gpu.ParseAssignment(raw)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("pod %s: %v", pod.Name, err))
			continue
		case a.Node != pod.Spec.NodeName:
			problems = append(problems, fmt.Sprintf("pod %s is bound to %s but assigned GPUs of %s", pod.Name, pod.Spec.NodeName, a.Node))
			continue
		}
		for _, d := range a.Devices {
			if d < 0 || int64(d) >= gpusOf[a.Node] {
				problems = append(problems, fmt.Sprintf("pod %s is assigned GPU %d of %s, which has %d", pod.Name, d, a.Node, gpusOf[a.Node]))
				continue
			}
			key := fmt.Sprintf("%s/%d", a.Node, d)
			h.pods[key] = append(h.pods[key], fmt.Sprintf("%s (%d milli)", pod.Name, a.Milli))
			h.milli[key] += a.Milli
		}
	}
	for key, milli := range h.milli {
		if milli > gpu.MilliPerGPU {
			slices.Sort(h.pods[key])
			problems = append(problems, fmt.Sprintf("GPU %s allocated %d milli-GPU, more than %d: %s", key, milli, gpu.MilliPerGPU, strings.Join(h.pods[key], ", ")))
		}
	}
	slices.Sort(problems)
	return checked, problems
}

// assertGPUsWithinCapacity fails the test with every problem
// checkGPUAllocations finds; when names what was just done.
func assertGPUsWithinCapacity(ctx context.Context, t *testing.T, c *testcluster.Cluster, when string) {
	t.Helper()
	checked, problems := checkGPUAllocations(ctx, c)
	for _, p := range problems {
		t.Errorf("%s: %s", when, p)
	}
	if len(problems) > 0 {
		t.FailNow()
	}
	t.Logf("%s: %d bound pods, no GPU allocated beyond its capacity", when, checked)
}
