package gpuview_test

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// TestReservationsShown: a node's reservations show on the GPUs they hold
// and count as allocated; a malformed annotation holds nothing and the
// node says why, naming the annotation.
func TestReservationsShown(t *testing.T) {
	rs := []gpu.Reservation{{ID: "d/p-1/0", Owner: "rs-uid", Namespace: "serving", GPUs: "node=a;gpus=1;milli=600;memory=0",
		Expires: time.Now().Add(10 * time.Minute)}}
	nodes := []*v1.Node{
		gt.MakeGPUNode("a").GFD("A100", 2, 81920).Annotation(gpu.AnnotationReservations, gpu.FormatReservations(rs)).Obj(),
		gt.MakeGPUNode("b").GFD("A100", 2, 81920).Annotation(gpu.AnnotationReservations, `[{"id":"x"}]`).Obj(),
	}
	s := gpuview.Build(nodes, nil, gpuview.Options{})
	a, _ := s.Node("a")
	if g := a.GPUs[1]; g.AllocatedMilli != 600 || len(g.Reserved) != 1 || g.Reserved[0].For != "the next pod of rs-uid in serving" {
		t.Errorf("node a GPU 1: allocated %d, reserved %+v; want 600 held for the next pod of rs-uid in serving", g.AllocatedMilli, g.Reserved)
	}
	if a.ReservationsError != "" || len(a.GPUs[0].Reserved) != 0 {
		t.Errorf("node a: error %q, GPU 0 reserved %+v", a.ReservationsError, a.GPUs[0].Reserved)
	}
	b, _ := s.Node("b")
	if !strings.Contains(b.ReservationsError, gpu.AnnotationReservations) || b.AllocatedMilli != 0 {
		t.Errorf("node b: error %q, allocated %d; want the annotation named and nothing held", b.ReservationsError, b.AllocatedMilli)
	}
}
