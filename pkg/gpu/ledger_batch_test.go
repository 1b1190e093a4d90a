package gpu_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestLedgerBatchOfReservations: pods reserved one after the other against a
// snapshot that holds none of them (the Workload API's pod-group cycle) are
// not given the same GPUs, and an assumption ends when its pod terminates.
func TestLedgerBatchOfReservations(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 4, 81920).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	bestFit, err := gpu.NewPolicy(gpu.PolicyBestFit, gpu.DefaultWeights)
	if err != nil {
		t.Fatal(err)
	}
	d := gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}
	var got []gpu.Assignment
	for _, uid := range []string{"p0", "p1"} {
		n := cache.view(l, node) // the same generation: the snapshot did not change
		chosen, reasons := gpu.Place(n, &d, bestFit)
		if reasons != 0 {
			t.Fatalf("%s: %s", uid, reasons)
		}
		a := gpu.NewAssignment(n, &d, chosen)
		if err := l.Assume(types.UID(uid), a); err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
		got = append(got, a)
	}
	for _, d0 := range got[0].Devices {
		for _, d1 := range got[1].Devices {
			if d0 == d1 {
				t.Fatalf("GPU %d given to both pods: %s and %s", d0, got[0].String(), got[1].String())
			}
		}
	}
	if free := cache.view(l, node).FreeMilliTotal(); free != 0 {
		t.Errorf("free milli-GPU %d after two 2-GPU reservations on 4 GPUs, want 0", free)
	}

	// p0 runs and terminates: its GPUs are free again, though never forgotten.
	done := gt.MakeGPUPod("p0").UID("p0").Node("n").Phase(v1.PodSucceeded).Obj()
	cache.put(done)
	if free := cache.view(l, node).FreeMilliTotal(); free != 2000 {
		t.Errorf("free milli-GPU %d after p0 terminated, want 2000", free)
	}
	if _, ok := l.Assumed("p0"); ok {
		t.Error("a terminated pod kept its assumption")
	}
}
