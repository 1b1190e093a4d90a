package simulator

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestScreenFindsNodesByName: the screen finds each node by its name
// wherever it stands in the list it screens, also when the list is
// reordered or cut (a PreFilter that limits the nodes) after it remembered
// the positions: a node of two free GPUs is told apart from a node of none.
func TestScreenFindsNodesByName(t *testing.T) {
	free := gt.MakeGPUNode("free").GFD("T4", 2, 15360).Obj()
	full := gt.MakeGPUNode("full").GFD("T4", 2, 15360).Obj()
	other := gt.MakeGPUNode("other").GFD("T4", 2, 15360).Obj()
	tracker := newFragTracker([]*v1.Node{free, full, other}, nil)
	holder := gt.MakeGPUPod("holder").GPUs(2).Annotation(gpu.AnnotationAssigned, "node=full;gpus=0,1").Obj()
	holder.Spec.NodeName = "full"
	tracker.bind(holder)
	check := tracker.screenDemand(gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU})
	for _, list := range [][]string{
		{"free", "full", "other"},
		{"full", "free", "other"}, // reordered
		{"full", "other"},         // cut
		{"other", "free", "full"},
		{"free", "full", "other"},
	} {
		for i, name := range list {
			ok, reasons := check(i, name)
			if want := name != "full"; ok != want {
				t.Errorf("list %v: %s at %d screened %v (%v), want %v", list, name, i, ok, reasons, want)
			}
		}
	}
	if ok, _ := check(7, "unknown"); !ok {
		t.Error("a node the tracker does not know was screened out; the Filter plugins decide it")
	}
}
