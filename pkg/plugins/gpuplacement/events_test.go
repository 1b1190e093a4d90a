package gpuplacement

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestQueueingHints(t *testing.T) {
	pending := gt.MakeGPUPod("pending").GPUs(2).Models("A100").Obj()
	a100 := gt.MakeGPUNode("n").GFD("A100", 8, 81920)
	tests := []struct {
		name     string
		hint     fwk.QueueingHintFn
		pod      *v1.Pod
		old, new any
		want     fwk.QueueingHint
	}{
		{name: "deleted pod held GPUs", hint: isSchedulableAfterPodDelete, pod: pending,
			old: gt.MakeGPUPod("gone").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}).Obj(), want: fwk.Queue},
		{name: "deleted pod requested whole GPUs", hint: isSchedulableAfterPodDelete, pod: pending,
			old: gt.MakeGPUPod("gone").GPUs(1).Node("n").Obj(), want: fwk.Queue},
		{name: "deleted pod held no GPU", hint: isSchedulableAfterPodDelete, pod: pending,
			old: gt.MakeGPUPod("gone").CPU("1").Node("n").Obj(), want: fwk.QueueSkip},
		{name: "new node that could host the pod", hint: isSchedulableAfterNodeChange, pod: pending,
			new: a100.Obj(), want: fwk.Queue},
		{name: "new node of another model", hint: isSchedulableAfterNodeChange, pod: pending,
			new: gt.MakeGPUNode("n").GFD("T4", 8, 15360).Obj(), want: fwk.QueueSkip},
		{name: "new node with one GPU", hint: isSchedulableAfterNodeChange, pod: pending,
			new: gt.MakeGPUNode("n").GFD("A100", 1, 81920).Obj(), want: fwk.QueueSkip},
		{name: "node update that leaves the GPUs alone", hint: isSchedulableAfterNodeChange, pod: pending,
			old: a100.Obj(), new: gt.MakeGPUNode("n").GFD("A100", 8, 81920).Label("team", "x").Obj(), want: fwk.QueueSkip},
		{name: "node's GPU reservations change", hint: isSchedulableAfterNodeChange, pod: pending,
			old: gt.MakeGPUNode("n").GFD("A100", 8, 81920).Annotation(gpu.AnnotationReservations, `[{"id":"p/0","pod":"u","gpus":"node=n;gpus=0","expires":"2030-01-01T00:00:00Z"}]`).Obj(),
			new: a100.Obj(), want: fwk.Queue},
		{name: "node gains GPUs", hint: isSchedulableAfterNodeChange, pod: pending,
			old: gt.MakeGPUNode("n").GFD("A100", 1, 81920).Obj(), new: a100.Obj(), want: fwk.Queue},
		{name: "pending pod is malformed: node events cannot help", hint: isSchedulableAfterNodeChange,
			pod: gt.MakeGPUPod("bad").Milli(5000).Obj(), new: a100.Obj(), want: fwk.QueueSkip},
		{name: "malformed annotation fixed", hint: isSchedulableAfterPodUpdate, pod: pending,
			old: gt.MakeGPUPod("p").Milli(5000).Obj(), new: gt.MakeGPUPod("p").Milli(500).Obj(), want: fwk.Queue},
		{name: "pod update that leaves GPU annotations alone", hint: isSchedulableAfterPodUpdate, pod: pending,
			old: gt.MakeGPUPod("p").Milli(500).Obj(), new: gt.MakeGPUPod("p").Milli(500).Annotation("x", "y").Obj(), want: fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got, err := tt.hint(logger, tt.pod, tt.old, tt.new)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("hint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEventsToRegister(t *testing.T) {
	events, err := (&GPUPlacement{}).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.QueueingHintFn == nil {
			t.Errorf("event %v has no queueing hint", e.Event)
		}
	}
	if len(events) != 3 {
		t.Errorf("%d events, want 3", len(events))
	}
}

func TestSignPod(t *testing.T) {
	p := &GPUPlacement{policy: gpu.MustPolicy(gpu.DefaultPolicy, gpu.PolicyConfig{Shapes: gpu.StaticShapes{}})}
	sign := func(pod *v1.Pod) any {
		fragments, status := p.SignPod(context.Background(), pod)
		if !status.IsSuccess() {
			return status.Code()
		}
		return fragments[0].Value
	}
	a := sign(gt.MakeGPUPod("a").Milli(250).Models("H100", "A100").Obj())
	b := sign(gt.MakeGPUPod("b").Milli(250).Models("A100", "H100").Obj())
	c := sign(gt.MakeGPUPod("c").Milli(300).Models("A100", "H100").Obj())
	if !reflect.DeepEqual(a, b) {
		t.Errorf("equal demands signed differently: %v, %v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("different demands signed alike: %v, %v", a, c)
	}
	if got := sign(gt.MakeGPUPod("bad").Milli(0).Obj()); got != fwk.Unschedulable {
		t.Errorf("malformed pod signed: %v", got)
	}
}
