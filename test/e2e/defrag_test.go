package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestDefragmenterMakesRoom runs the defragmenter against a real API server
// with the workload controllers and gpusched scheduling. Two nodes of 4
// A100s each hold two replicas of Deployment "infer" (shares of 600
// milli-GPU, one per GPU, opted in to moving): 2 GPUs free on each node,
// so the 4-GPU pod "trainer" fits neither.
//
//   - With a PodDisruptionBudget that allows no disruption, no plan is
//     carried out, and the trainer is told which budget stands in the way.
//   - DryRun says what it would move and changes nothing: no pod evicted,
//     no GPU reserved.
//   - Enforce moves the fewest replicas (2, from one node to the other's
//     free GPUs), their replacements land on the GPUs the plan reserved,
//     the trainer binds on the node made room on, every replica runs
//     again, no GPU is given twice, and the plan releases every
//     reservation. A 3-GPU pod of higher priority ("rival", which the
//     defragmenter does not plan for: it arrives while the scheduler is
//     down, so no attempt has found it unschedulable) is first in the
//     queue once the scheduler is back: only the reservations keep it off
//     the GPUs the plan freed. The plan is finished by another instance
//     of the defragmenter than the one that started it, as after a leader
//     change; a third, allowed 2 moves an hour, finds them spent by the
//     plan's.
func TestDefragmenterMakesRoom(t *testing.T) {
	ctx := context.Background()
	c := testcluster.StartWithControllers(t)
	for _, name := range []string{"node-a", "node-b"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD(a100, 4, 81920).Obj())
	}
	sched := startGPUSched(ctx, t, c)

	// Two replicas on node-a, then two on node-b: each share takes a GPU
	// of its own (600 + 600 > 1000).
	setCordoned(ctx, t, c, "node-b", true)
	createInferDeployment(ctx, t, c, 2)
	waitForReplicasBound(ctx, t, c, 2)
	setCordoned(ctx, t, c, "node-b", false)
	setCordoned(ctx, t, c, "node-a", true)
	scaleInfer(ctx, t, c, 4)
	waitForReplicasBound(ctx, t, c, 4)
	setCordoned(ctx, t, c, "node-a", false)
	before := replicaUIDs(ctx, t, c)

	createPod(ctx, t, c, gt.MakeGPUPod("trainer").GPUs(4).Obj())
	testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "trainer", "FailedScheduling", timeout)

	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "infer"}}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	enforce := startDefragmenter(ctx, t, c, defrag.Enforce)
	waitForDefragEvent(ctx, t, c, enforce, "NoMigrationPlan", "PodDisruptionBudget default/infer allows no disruption")
	assertUnchanged(ctx, t, c, before, "with a budget of no disruption")
	expectOutput(t, kubectlGPUSched(ctx, t, c, "explain", "trainer"),
		"Migration: a migration plan would make room for this pod, but PodDisruptionBudget default/infer allows no disruption now")

	if err := c.Client.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "infer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dry := startDefragmenter(ctx, t, c, defrag.DryRun)
	msg := waitForDefragEvent(ctx, t, c, dry, "WouldMakeRoom", "moving 2 pod(s) makes room for default/trainer")
	t.Logf("DryRun: %s", msg)
	assertUnchanged(ctx, t, c, before, "in DryRun")
	expectOutput(t, kubectlGPUSched(ctx, t, c, "explain", "trainer"),
		"Migration: the defragmenter (gpusched defragment) would make room: moving 2 pod(s) makes room for default/trainer")

	// Enforce, with the scheduler down: one round reserves the GPUs and
	// evicts; the reservations stay until a later round sees their pods
	// arrive. The rival and the replacements wait in the queue.
	sched.Stop()
	// The rival does not preempt: it would evict the replicas on node-b
	// once the plan is done, which is preemption's business, not this
	// test's.
	never := v1.PreemptNever
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "rival"}, Value: 100, PreemptionPolicy: &never}
	if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPriorityClass(ctx, t, c, "rival")
	rival := gt.MakeGPUPod("rival").GPUs(3).Obj()
	rival.Spec.PriorityClassName = "rival"
	createPod(ctx, t, c, rival)
	msg = waitForDefragEvent(ctx, t, c, enforce, "MakingRoom", "moving 2 pod(s) makes room for default/trainer")
	t.Logf("Enforce: %s", msg)
	// While the plan runs, explain shows the GPUs it holds for the trainer.
	expectOutput(t, kubectlGPUSched(ctx, t, c, "explain", "trainer"), "Migration: a migration plan under way reserved node")
	// kubectl gpusched gpus shows what holds each GPU: the reservations too.
	expectOutput(t, kubectlGPUSched(ctx, t, c, "gpus"), "reserved 1000m for pod ", "reserved 600m for the next pod of ")
	// The instance that started the plan stops (it lost its lease); the
	// next one adopts the plan from its reservations and follows it to
	// the end.
	enforce = startDefragmenter(ctx, t, c, defrag.Enforce)
	startGPUSched(ctx, t, c)
	reserved := nodeReservations(ctx, t, c)
	if len(reserved) != 3 {
		t.Fatalf("reservations %v; want the trainer's and one per moved replica", reserved)
	}
	trainer := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", "trainer", timeout)
	var forTrainer gpu.Reservation
	var forReplicas []gpu.Reservation
	for _, r := range reserved {
		if r.Pod != "" {
			forTrainer = r
		} else {
			forReplicas = append(forReplicas, r)
		}
	}
	if got, _ := gpu.AssignmentOf(trainer); got.String() != forTrainer.Assignment.String() {
		t.Errorf("trainer got %s, its plan reserved %s", got.String(), forTrainer.GPUs)
	}
	// The two replacements are bound on the GPUs reserved for them.
	var placed []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		placed = placed[:0]
		for _, p := range inferPods(ctx, t, c) {
			if before[p.UID] {
				continue
			}
			if a, ok := gpu.AssignmentOf(&p); ok {
				placed = append(placed, fmt.Sprintf("%s%v", a.Node, a.Devices))
			}
		}
		return len(placed) == 2, nil
	})
	if err != nil {
		t.Fatalf("replacements bound: %v; want 2", placed)
	}
	var planned []string
	for _, r := range forReplicas {
		planned = append(planned, fmt.Sprintf("%s%v", r.Assignment.Node, r.Assignment.Devices))
	}
	slices.Sort(placed)
	slices.Sort(planned)
	if !slices.Equal(placed, planned) {
		t.Errorf("replacements bound on %v, the plan reserved %v", placed, planned)
	}
	waitForDefragEvent(ctx, t, c, enforce, "MigrationDone", "done; this pod and the pods moved for it are bound")
	if left := nodeReservations(ctx, t, c); len(left) != 0 {
		t.Errorf("reservations left after the plan: %v", left)
	}
	// The ReplicaSet controller, reading a cache behind its writes, may
	// create a replica too many for a moment and delete it: wait for it to
	// settle on 4, all bound.
	var desc []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, bound := inferPods(ctx, t, c), 0
		desc = desc[:0]
		for _, p := range pods {
			desc = append(desc, fmt.Sprintf("%s on %q (deleting %v, %s)", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Annotations[gpu.AnnotationAssigned]))
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return len(pods) == 4 && bound == 4, nil
	})
	if err != nil {
		t.Errorf("replicas, want 4 bound: %s", strings.Join(desc, "; "))
	}
	kept := 0
	for _, p := range inferPods(ctx, t, c) {
		if before[p.UID] {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("%d replicas kept their pod, want 2 (2 moved)", kept)
	}
	if p, err := c.Client.CoreV1().Pods("default").Get(ctx, "rival", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("the rival took GPUs reserved for the plan's pods: bound to %q (%v)", p.Spec.NodeName, err)
	}
	assertNoGPUGivenTwice(ctx, t, c)

	// A new instance (a restart, a new leader) counts the 2 moves of the
	// last hour from their Migrated events: with 2 allowed per hour, it
	// moves nothing for the rival, which waits, unschedulable.
	testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "rival", "FailedScheduling", timeout)
	restarted := startDefragmenter(ctx, t, c, defrag.Enforce, func(o *defrag.Options) { o.MovesPerHour = 2 })
	waitForDefragEventOn(ctx, t, c, restarted, "rival", "NoMigrationPlan", "the 2 moves allowed per hour are spent")
}

// defragmenterRun is a defragmenter whose rounds the test drives.
type defragmenterRun struct {
	d *defrag.Defragmenter
}

func startDefragmenter(ctx context.Context, t *testing.T, c *testcluster.Cluster, mode defrag.Mode, options ...func(*defrag.Options)) *defragmenterRun {
	t.Helper()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "gpusched-defragmenter"})
	grace := int64(0) // no kubelet: a pod deleted with a grace period would stay until one confirms
	opts := defrag.Options{Mode: mode, GracePeriodSeconds: &grace, PlanTimeout: time.Minute, PodGroups: dynamic.NewForConfigOrDie(c.RestConfig)}
	for _, o := range options {
		o(&opts)
	}
	d, err := defrag.New(c.Client, recorder, defrag.NewMetrics(prometheus.NewRegistry()), opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := d.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	return &defragmenterRun{d: d}
}

// waitForDefragEvent runs rounds until the trainer has an event of reason
// whose message has want, and returns the message.
func waitForDefragEvent(ctx context.Context, t *testing.T, c *testcluster.Cluster, run *defragmenterRun, reason, want string) string {
	t.Helper()
	return waitForDefragEventOn(ctx, t, c, run, "trainer", reason, want)
}

// waitForDefragEventOn runs rounds until pod has an event of reason whose
// message has want, and returns the message.
func waitForDefragEventOn(ctx context.Context, t *testing.T, c *testcluster.Cluster, run *defragmenterRun, pod, reason, want string) string {
	t.Helper()
	var got string
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		seen = seen[:0]
		if err := run.d.Round(ctx); err != nil {
			t.Logf("round: %v", err)
		}
		events, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == pod {
				seen = append(seen, ev.Reason+": "+ev.Message)
			}
			if ev.InvolvedObject.Name == pod && ev.Reason == reason {
				got = ev.Message
				if strings.Contains(ev.Message, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s saying %q (last: %q); its events:\n%s", reason, pod, want, got, strings.Join(seen, "\n"))
	}
	return got
}

func createInferDeployment(ctx context.Context, t *testing.T, c *testcluster.Cluster, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": "infer"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					gpu.AnnotationMilli: "600", defrag.AnnotationMovable: "true"}},
				Spec: v1.PodSpec{SchedulerName: schedulerName, Containers: []v1.Container{{Name: "serve", Image: "registry.k8s.io/pause:3.10"}}},
			}}}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scaleInfer(ctx context.Context, t *testing.T, c *testcluster.Cluster, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.Client.AppsV1().Deployments("default").Patch(ctx, "infer", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func inferPods(ctx context.Context, t *testing.T, c *testcluster.Cluster) []v1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func waitForReplicasBound(ctx context.Context, t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		bound := 0
		for _, p := range inferPods(ctx, t, c) {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n, nil
	})
	if err != nil {
		t.Fatalf("%d replicas of infer not bound: %v", n, err)
	}
}

func replicaUIDs(ctx context.Context, t *testing.T, c *testcluster.Cluster) map[types.UID]bool {
	t.Helper()
	out := map[types.UID]bool{}
	for _, p := range inferPods(ctx, t, c) {
		out[p.UID] = true
	}
	return out
}

// assertUnchanged fails when a replica was replaced or a node holds a
// reservation.
func assertUnchanged(ctx context.Context, t *testing.T, c *testcluster.Cluster, before map[types.UID]bool, when string) {
	t.Helper()
	time.Sleep(time.Second) // an eviction, were one sent, reaches the controllers
	now := replicaUIDs(ctx, t, c)
	if len(now) != len(before) {
		t.Errorf("%s: %d replicas, want %d", when, len(now), len(before))
	}
	for uid := range now {
		if !before[uid] {
			t.Errorf("%s: replica %s is new: a pod was moved", when, uid)
		}
	}
	if rs := nodeReservations(ctx, t, c); len(rs) != 0 {
		t.Errorf("%s: reservations %v", when, rs)
	}
}

func nodeReservations(ctx context.Context, t *testing.T, c *testcluster.Cluster) []gpu.Reservation {
	t.Helper()
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []gpu.Reservation
	for i := range nodes.Items {
		rs, err := gpu.ReservationsOf(&nodes.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

func setCordoned(ctx context.Context, t *testing.T, c *testcluster.Cluster, node string, cordoned bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, cordoned)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDefragmenterGivesUpAPlanNeverCarriedOut: a defragmenter stopped
// after reserving a plan's GPUs and before evicting its pods. The next one
// finds the plan in the reservations, sees that the pod it moves still
// runs where it was, gives the plan up (telling the pending pod why) and
// removes its reservations: the pending pod is not held to a node where no
// room was made.
func TestDefragmenterGivesUpAPlanNeverCarriedOut(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("node-a").GFD(a100, 2, 81920).Obj())
	infer := gt.MakeGPUPod("infer").Milli(600).Node("node-a").Assigned(gpu.Assignment{Node: "node-a", Devices: []int{0}, Milli: 600}).
		OwnedBy("ReplicaSet", "infer", "rs-uid").Annotation(defrag.AnnotationMovable, "true").Obj()
	infer.UID = ""
	running, err := c.Client.CoreV1().Pods("default").Create(ctx, infer, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trainer := gt.MakeGPUPod("trainer").GPUs(2).Obj()
	trainer.UID = ""
	pending, err := c.Client.CoreV1().Pods("default").Create(ctx, trainer, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(10 * time.Minute).UTC()
	rs := []gpu.Reservation{
		{ID: "gpusched-defragmenter/20261130t120000-1/pod", Pod: pending.UID, GPUs: "node=node-a;gpus=0,1;milli=1000;memory=0", Expires: expires},
		{ID: "gpusched-defragmenter/20261130t120000-1/0", Owner: "rs-uid", Namespace: "default", Moves: running.UID,
			GPUs: "node=node-b;gpus=0;milli=600;memory=0", Expires: expires},
	}
	// The pod's reservation on node-a; the moved pod's would be on another
	// node, which this cluster lacks: only node-a's matters here.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gpu.AnnotationReservations, gpu.FormatReservations(rs[:1]))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("node-b").GFD(a100, 1, 81920).Obj())
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gpu.AnnotationReservations, gpu.FormatReservations(rs[1:]))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	next := startDefragmenter(ctx, t, c, defrag.Enforce)
	waitForDefragEvent(ctx, t, c, next, "MigrationExpired", "pod default/infer, which it moves, was never evicted")
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := next.d.Round(ctx); err != nil {
			return false, nil
		}
		return len(nodeReservations(ctx, t, c)) == 0, nil
	})
	if err != nil {
		t.Errorf("reservations left: %v", nodeReservations(ctx, t, c))
	}
	if p, err := c.Client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{}); err != nil || p.UID != running.UID || p.DeletionTimestamp != nil {
		t.Errorf("the moved pod was touched: %v", err)
	}
}
