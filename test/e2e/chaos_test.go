package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestChaosWatchCompacted compacts etcd at its current revision, after many
// object updates, while a burst of 120 GPU pods (40 whole GPUs and 80 shares
// of 200 milli-GPU, 56 GPUs asked of 20) is being scheduled: watches that
// fall behind the compaction must relist, and the scheduler must still place
// every pod that fits, leave a reason on every other one, and never give a
// GPU beyond its capacity.
func TestChaosWatchCompacted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startChaosCluster(ctx, t)
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{c.EtcdEndpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()

	compacted := make(chan error, 1)
	go func() { compacted <- churnAndCompact(ctx, c, etcd) }()
	for _, p := range chaosBurst(40, 80) {
		createPod(ctx, t, c, p)
	}
	if err := <-compacted; err != nil {
		t.Fatalf("compacting etcd: %v", err)
	}
	bound, pending := waitForSettledBurst(ctx, t, c, 60*time.Second)
	t.Logf("after compaction: %d pods bound, %d pending with a reason", bound, pending)
	if bound == 0 {
		t.Fatal("no pod bound")
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// churnAndCompact patches a node label 200 times, so that etcd's revision
// moves well past what the watches last saw, then compacts at the current
// revision (twice, the second time after more updates).
func churnAndCompact(ctx context.Context, c *testcluster.Cluster, etcd *clientv3.Client) error {
	for round := 0; round < 2; round++ {
		for i := 0; i < 100; i++ {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"chaos":"r%d-%d"}}}`, round, i)
			if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "cpu-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		resp, err := etcd.Get(ctx, "compaction-probe")
		if err != nil {
			return err
		}
		if _, err := etcd.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			return err
		}
	}
	return nil
}

// TestChaosNodeDeletedMidBurst deletes a GPU node while a burst of 60
// whole-GPU pods (of 20 GPUs) is being scheduled and adds a new one: pods
// created after the deletion never land on the deleted node, the pods that
// did not fit go to the new node, and no GPU is given twice.
func TestChaosNodeDeletedMidBurst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startChaosCluster(ctx, t)

	burst := chaosBurst(60, 0)
	for _, p := range burst[:20] {
		createPod(ctx, t, c, p)
	}
	if err := c.Client.CoreV1().Nodes().Delete(ctx, "a100-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range burst[20:] {
		createPod(ctx, t, c, p)
	}
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-1").GFD(a100, 8, 81920).Obj())

	bound, pending := waitForSettledBurst(ctx, t, c, 60*time.Second)
	t.Logf("after node deletion: %d pods bound, %d pending with a reason", bound, pending)
	for _, p := range burst[20:] {
		got, err := c.Client.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName == "a100-0" {
			t.Errorf("pod %s, created after a100-0 was deleted, bound to it", p.Name)
		}
	}
	onNew := 0
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "a100-1" {
			onNew++
		}
	}
	if onNew != 8 {
		t.Errorf("%d pods on the new node a100-1, want 8 (its GPUs, with 40 pods pending)", onNew)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestChaosNodeDeletedUnderWaitingGang deletes the only GPU node while the
// first pod of a two-pod gang is reserved there, waiting at Permit for its
// sibling, and adds another node: the reservation is released and the whole
// gang is bound to the new node, none of it to the deleted one.
func TestChaosNodeDeletedUnderWaitingGang(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Obj())
	sched := startGangSched(ctx, t, c, gangConfig(t))

	createPodGroup(ctx, t, dyn, "train", 2, 0)
	createPod(ctx, t, c, gangPod("train-0", "train", 4))
	time.Sleep(time.Second) // train-0 is reserved on a100-0, waiting at Permit
	if err := c.Client.CoreV1().Nodes().Delete(ctx, "a100-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-1").GFD(a100, 8, 81920).Obj())
	// The scheduler learns of the deletion through its watch. A pod
	// scheduled before the event arrives may still be placed on the deleted
	// node, as with any kube-scheduler (the Binding API does not check that
	// the node exists; the pod garbage collector removes such pods): on a
	// loaded machine the event can come late. What is tested is what the
	// scheduler does once it knows.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !sched.KnowsNode("a100-0") && sched.KnowsNode("a100-1"), nil
	})
	if err != nil {
		t.Fatalf("the scheduler never saw a100-0 deleted and a100-1 added: %v", err)
	}
	createPod(ctx, t, c, gangPod("train-1", "train", 4))

	for _, name := range []string{"train-0", "train-1"} {
		if a := assignmentOf(ctx, t, c, name); a.Node != "a100-1" {
			t.Errorf("pod %s assigned GPUs on %s, want the new node a100-1", name, a.Node)
		}
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// TestChaosPrometheusKilled kills the Prometheus the telemetry profile reads
// while it runs: as docs/telemetry.md documents, refreshes fail
// (gpusched_telemetry_refresh_errors_total grows) and pods keep scheduling.
func TestChaosPrometheusKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exporter := startDCGMExporter(t)
	g := dcgmGPU{node: "tel-a", hostLabel: "Hostname", index: 0, uuid: "GPU-a0", model: a100}
	exporter.set("DCGM_FI_DEV_GPU_UTIL", g, "0")
	prom := startPrometheus(t, exporter.addr())
	prom.waitForValue(ctx, t, `DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a0"}`, "0")

	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("tel-a").GFD(a100, 8, 81920).Obj())
	c.StartScheduler(ctx, t, telemetryConfig(prom.url), plugins.CommandOptions()...)
	waitForMetric(ctx, t, "gpusched_telemetry_stale", "0 (fresh)", func(v float64) bool { return v == 0 })

	errorsBefore := metricValue(t, "gpusched_telemetry_refresh_errors_total")
	prom.stop()
	waitForMetric(ctx, t, "gpusched_telemetry_refresh_errors_total", "to grow", func(v float64) bool { return v > errorsBefore })
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("blind-%d", i)
		createPod(ctx, t, c, gt.MakeGPUPod(name).GPUs(2).Obj())
		assignmentOf(ctx, t, c, name)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}
