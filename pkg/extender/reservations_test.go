package extender

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestReservations: node b (2 A100s) holds a defragmenter's reservation
// of both its GPUs for pod "trainer"; node a (2 A100s) is idle. As under
// the GPUPlacement plugin:
//   - Filter sends the trainer to b alone (a fails, unresolvably, naming
//     the reservation), and b fits it: its reserved GPUs are given back
//     to it;
//   - another 2-GPU pod fits a, not b (the reservation holds b's GPUs);
//   - Prioritize scores b for the trainer;
//   - Bind places the trainer on the reserved GPUs and takes the
//     reservation: it no longer holds, and b's GPUs are the trainer's.
func TestReservations(t *testing.T) {
	trainer := gt.MakeGPUPod("trainer").GPUs(2).Obj()
	other := gt.MakeGPUPod("other").GPUs(2).Obj()
	r := gpu.Reservation{ID: "defrag/p-1/pod", Pod: trainer.UID, GPUs: "node=b;gpus=0,1;milli=1000;memory=0", Expires: time.Now().Add(10 * time.Minute)}
	reserved := gt.MakeGPUNode("b").GFD(a100, 2, 81920).Annotation(gpu.AnnotationReservations, gpu.FormatReservations([]gpu.Reservation{r})).Obj()
	te := newTestExtender(t, nil, []*v1.Node{gt.MakeGPUNode("a").GFD(a100, 2, 81920).Obj(), reserved}, []*v1.Pod{trainer, other})
	names := []string{"a", "b"}

	got := te.ext.Filter(te.ctx, &extenderv1.ExtenderArgs{Pod: trainer, NodeNames: &names})
	if got.NodeNames == nil || len(*got.NodeNames) != 1 || (*got.NodeNames)[0] != "b" || got.FailedAndUnresolvableNodes["a"] != MsgReservedElsewhere {
		t.Errorf("trainer: feasible %v, failed %v; want b alone, a failing with %q", got.NodeNames, got.FailedAndUnresolvableNodes, MsgReservedElsewhere)
	}
	got = te.ext.Filter(te.ctx, &extenderv1.ExtenderArgs{Pod: other, NodeNames: &names})
	if got.NodeNames == nil || len(*got.NodeNames) != 1 || (*got.NodeNames)[0] != "a" {
		t.Errorf("other: feasible %v, failed %v %v; want a alone", got.NodeNames, got.FailedNodes, got.FailedAndUnresolvableNodes)
	}
	b := []string{"b"}
	if prio := te.ext.Prioritize(te.ctx, &extenderv1.ExtenderArgs{Pod: trainer, NodeNames: &b}); len(prio) != 1 || prio[0].Score == 0 {
		t.Errorf("trainer on b scores %v; want more than 0 (the reserved GPUs are its own)", prio)
	}

	if res := te.ext.Bind(te.ctx, bindArgs(trainer, "b")); res.Error != "" {
		t.Fatalf("binding the trainer to b: %s", res.Error)
	}
	bound, err := te.client.CoreV1().Pods("default").Get(te.ctx, "trainer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := gpu.AssignmentOf(bound); a.String() != r.GPUs {
		t.Errorf("trainer got %s, its reservation is %s", a.String(), r.GPUs)
	}
	if te.ext.ledger.HoldsReservation(r.ID) {
		t.Error("the reservation still holds after its pod took it")
	}
}
