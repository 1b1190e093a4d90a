package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestWithWithout: a what-if view equals the ledger's view of the same pods,
// and the view it started from is unchanged.
func TestWithWithout(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 4, 40960).Obj()
	whole := gpu.Assignment{Node: "n", Devices: []int{0, 1}, Milli: 1000}
	share := gpu.Assignment{Node: "n", Devices: []int{2}, Milli: 300, MemoryMiB: 4096}

	empty := gpu.EmptyNodeGPUs(node)
	both := empty.With(&whole).With(&share)
	want := nodeWithPods(t, gt.MakeGPUNode("n").GFD("A100", 4, 40960), whole, share)
	for i := range want.Used {
		if both.Used[i] != want.Used[i] {
			t.Errorf("GPU %d: with = %+v, ledger = %+v", i, both.Used[i], want.Used[i])
		}
	}
	// 2000 + 300 used of 4000: 1700 free.
	if got := both.FreeMilliTotal(); got != 1700 {
		t.Errorf("free = %d, want 1700", got)
	}
	if got := empty.FreeMilliTotal(); got != 4000 {
		t.Errorf("the starting view changed: free = %d, want 4000", got)
	}
	// Without the whole GPUs, a 3-GPU pod fits again: GPUs 0, 1 and 3 are idle.
	req := gpu.Request{Demand: &gpu.Demand{Count: 3, Milli: 1000}}
	if fit := gpu.Check(both, &req); fit.OK() {
		t.Fatal("3 GPUs fit beside 2 taken and a share")
	}
	if fit := gpu.Check(both.Without(&whole), &req); !fit.OK() || fit.Free != 0b1011 {
		t.Errorf("without the pair: fit %+v, want free 1011", fit)
	}
	if got := both.PodsOfClass(gpu.ClassOf(1000, 2)); got != 1 {
		t.Errorf("2-GPU pods = %d, want 1", got)
	}
}

func TestDemandKey(t *testing.T) {
	a := gpu.Demand{Count: 1, Milli: 500, Models: []string{"T4", "A100"}}
	b := gpu.Demand{Count: 1, Milli: 500, Models: []string{"A100", "T4"}}
	if a.Key() != b.Key() {
		t.Errorf("the order of models changed the key: %+v vs %+v", a.Key(), b.Key())
	}
	c := b
	c.MemoryMiB = 1024
	if c.Key() == b.Key() || c.ShapeKey() != b.ShapeKey() {
		t.Error("GPU memory must change the key but not the shape key")
	}
}

func TestSameDemandSource(t *testing.T) {
	p := gt.MakeGPUPod("p").Milli(300).Obj()
	q := p.DeepCopy()
	q.Annotations["unrelated"] = "x"
	if !gpu.SameDemandSource(p, q) {
		t.Error("an unrelated annotation changed the demand source")
	}
	for _, key := range gpu.DemandAnnotations {
		r := p.DeepCopy()
		r.Annotations[key] = "changed"
		if gpu.SameDemandSource(p, r) {
			t.Errorf("a change of %s went unnoticed", key)
		}
	}
	for _, key := range gpu.InventorySources {
		n := gt.MakeGPUNode("n").GFD("A100", 4, 40960).Obj()
		before := gpu.InventorySignature(n)
		n.Labels[key] = "changed"
		if gpu.InventorySignature(n) == before {
			t.Errorf("a change of %s left the inventory signature equal", key)
		}
	}
}
