package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestGangContention submits five gangs at once, interleaved pod by pod,
// that together ask for more than three times the cluster: each gang is
// three pods of 2 GPUs (6 GPUs), the cluster has 12. At most two gangs fit at
// a time, so gangs hold GPUs at Permit while others wait, time out and are
// released. The test plays the part of the workload: once all of a gang's
// pods are bound it lets them run briefly and deletes them.
//
// It asserts, polling every 100 ms, that no gang stays partially bound
// (bound pods of a gang that never completes), that no GPU is ever given
// twice, and that every gang eventually runs; then that the scheduler holds
// no leftover reservation: one last gang takes all 12 GPUs.
func TestGangContention(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	for _, n := range []*gt.NodeWrapper{
		gt.MakeGPUNode("a0").GFD(a100, 4, 81920).Clique("c1").Label(rackLabel, "r1"),
		gt.MakeGPUNode("a1").GFD(a100, 4, 81920).Clique("c1").Label(rackLabel, "r1"),
		gt.MakeGPUNode("b0").GFD(a100, 4, 81920).Clique("c2").Label(rackLabel, "r2"),
	} {
		testcluster.CreateNode(ctx, t, c.Client, n.Obj())
	}
	startGangSched(ctx, t, c, gangConfig(t))

	const gangs, size, gpus = 5, 3, 2
	for g := range gangs {
		createPodGroup(ctx, t, dyn, fmt.Sprintf("g%d", g), size, 2)
	}
	for i := range size {
		for g := range gangs {
			createPod(ctx, t, c, gangPod(fmt.Sprintf("g%d-%d", g, i), fmt.Sprintf("g%d", g), gpus))
		}
	}

	const partialLimit = 2 * time.Second // binding an allowed gang takes milliseconds
	const runFor = 300 * time.Millisecond
	partialSince := map[int]time.Time{}
	completeAt := map[int]time.Time{}
	done := map[int]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for len(done) < gangs {
		if time.Now().After(deadline) {
			t.Fatalf("only gangs %v ran within 90 s", done)
		}
		bound, err := boundPods(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if overlap := gpuOverlap(bound); overlap != "" {
			t.Fatalf("%s", overlap)
		}
		now := time.Now()
		for g := range gangs {
			if done[g] {
				continue
			}
			n := 0
			for i := range size {
				if _, ok := bound[fmt.Sprintf("g%d-%d", g, i)]; ok {
					n++
				}
			}
			switch {
			case n == 0:
				delete(partialSince, g)
			case n < size:
				if _, ok := partialSince[g]; !ok {
					partialSince[g] = now
				} else if now.Sub(partialSince[g]) > partialLimit {
					t.Fatalf("gang g%d partially bound (%d of %d pods) for over %v", g, n, size, partialLimit)
				}
			default:
				if _, ok := completeAt[g]; !ok {
					completeAt[g] = now
				} else if now.Sub(completeAt[g]) >= runFor {
					var names []string
					for i := range size {
						names = append(names, fmt.Sprintf("g%d-%d", g, i))
					}
					deletePods(ctx, t, c, names...)
					done[g] = true
					t.Logf("gang g%d ran", g)
				}
			}
		}
		time.Sleep(testcluster.PollInterval)
	}

	// Gangs did contend: some were released (timed out, or a pod found no
	// node) and retried.
	events, err := c.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	released := 0
	for _, ev := range events.Items {
		if ev.Reason == "GangReleased" {
			released++
		}
	}
	if released == 0 {
		t.Error("no gang was ever released: the gangs did not contend")
	}
	t.Logf("GangReleased events: %d", released)

	// Every GPU is free again in the scheduler's ledger: a gang of three
	// 4-GPU pods takes the whole cluster.
	createPodGroup(ctx, t, dyn, "all", size, 0)
	for i := range size {
		createPod(ctx, t, c, gangPod(fmt.Sprintf("all-%d", i), "all", 4))
	}
	for i := range size {
		assignmentOf(ctx, t, c, fmt.Sprintf("all-%d", i))
	}
	assertNoGPUGivenTwice(ctx, t, c)
}
