package gpuplacement_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestReservationsSendTheirPodsWhereReserved: node "b" (3 GPUs) holds
// GPU 0 for the pending pod with UID "pending" and 500 milli-GPU of GPU 1
// for the next such share of ReplicaSet "rs-uid" (the defragmenter's
// plan); a bound pod holds 500 of GPU 2. Node "a" is empty. Only those
// pods may use the reserved GPUs, and they are sent to them.
func TestReservationsSendTheirPodsWhereReserved(t *testing.T) {
	soon := time.Now().Add(time.Hour)
	rs := []gpu.Reservation{
		{ID: "plan/0", Pod: "pending", GPUs: "node=b;gpus=0;milli=1000;memory=0", Expires: soon},
		{ID: "plan/1", Owner: "rs-uid", Namespace: "default", GPUs: "node=b;gpus=1;milli=500;memory=0", Expires: soon},
	}
	nodes := []*v1.Node{
		gt.MakeGPUNode("a").GFD(a100, 2, 81920).Obj(),
		gt.MakeGPUNode("b").GFD(a100, 3, 81920).Annotation(gpu.AnnotationReservations, gpu.FormatReservations(rs)).Obj(),
	}
	// The plugin follows the nodes' reservations through the informer
	// factory of the framework's handle, here over a client holding the
	// nodes.
	factory := informers.NewSharedInformerFactory(fake.NewClientset(nodes[0], nodes[1]), 0)
	bound := gt.MakeGPUPod("bound").Node("b").Assigned(gpu.Assignment{Node: "b", Devices: []int{2}, Milli: 500}).Obj()
	c := newClusterBinding(t, nil, nodes, []*v1.Pod{bound}, false, frameworkruntime.WithInformerFactory(factory))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	pending := gt.MakeGPUPod("pending").UID("pending").GPUs(1).Obj()
	for deadline := time.Now().Add(10 * time.Second); preFilterNodes(t, c, pending) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // the informer's handler has not seen b
			t.Fatal("the plugin never saw node b's reservations")
		}
	}

	// A 1-GPU pod of no plan: b's GPUs are reserved or held (GPU 0 whole,
	// GPU 1 and GPU 2 500 of 1000), so it fits only a; it is not sent
	// anywhere.
	other := gt.MakeGPUPod("other").UID("other").GPUs(1).Obj()
	if got := preFilterNodes(t, c, other); got != nil {
		t.Errorf("a pod of no plan is sent to %v", got)
	}
	verdicts, _ := filter(t, c, other)
	if !strings.HasPrefix(verdicts["b"], "Unschedulable") || !strings.HasPrefix(verdicts["a"], "Success") {
		t.Errorf("a pod of no plan: filter %v; want a only", verdicts)
	}
	// A share of 600 does not fit b: 500 free on GPU 1 beside its
	// reservation, 500 on GPU 2.
	stranger := gt.MakeGPUPod("stranger").UID("stranger").Milli(600).Obj()
	if verdicts, _ := filter(t, c, stranger); !strings.HasPrefix(verdicts["b"], "Unschedulable") {
		t.Errorf("a share of 600 fits b, whose GPUs 1 and 2 have 500 free each: %v", verdicts)
	}

	// The pending pod is sent to b and given GPU 0.
	if got := preFilterNodes(t, c, pending); strings.Join(got, ",") != "b" {
		t.Errorf("the pending pod is sent to %v, want [b]", got)
	}
	if _, a := c.schedule(t, pending, "b"); !strings.Contains(a, "gpus=0;") {
		t.Errorf("the pending pod got %q, want GPU 0 of b", a)
	}
	// The ReplicaSet's new share of 500 is sent to b and given GPU 1's
	// reserved half, although GPU 2's free half fits it as tightly (the
	// policy alone chooses GPU 2: TestReservationsSendTheirPodsWhereReserved
	// fails without gpu.Reservation.Onto); a share of 300 of the same ReplicaSet is not its
	// shape and goes anywhere.
	moved := gt.MakeGPUPod("moved").UID("moved").OwnedBy("ReplicaSet", "rs", "rs-uid").Milli(500).Obj()
	if got := preFilterNodes(t, c, moved); strings.Join(got, ",") != "b" {
		t.Errorf("the ReplicaSet's share is sent to %v, want [b]", got)
	}
	if _, a := c.schedule(t, moved, "b"); !strings.Contains(a, "gpus=1;milli=500") {
		t.Errorf("the ReplicaSet's share got %q, want 500 of GPU 1 of b", a)
	}
	// Taken, the reservation no longer draws the ReplicaSet's other pods
	// of that shape to b.
	again := gt.MakeGPUPod("again").UID("again").OwnedBy("ReplicaSet", "rs", "rs-uid").Milli(500).Obj()
	if got := preFilterNodes(t, c, again); got != nil {
		t.Errorf("once taken, the reservation still sends the ReplicaSet's pods to %v", got)
	}
	small := gt.MakeGPUPod("small").UID("small").OwnedBy("ReplicaSet", "rs", "rs-uid").Milli(300).Obj()
	if got := preFilterNodes(t, c, small); got != nil {
		t.Errorf("a share of another shape is sent to %v", got)
	}
}

// preFilterNodes is the nodes PreFilter limits the pod's cycle to, sorted;
// nil for all nodes.
func preFilterNodes(t *testing.T, c *testCluster, pod *v1.Pod) []string {
	t.Helper()
	res, status, _ := c.fw.RunPreFilterPlugins(context.Background(), framework.NewCycleState(), pod)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	if res.AllNodes() {
		return nil
	}
	return sets.List(res.NodeNames)
}
