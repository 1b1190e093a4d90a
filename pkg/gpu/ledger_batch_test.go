package gpu_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestLedgerBatchOfReservations: pods reserved one after the other with
// NodeInFlight against a snapshot that holds none of them (the Workload
// API's pod-group cycle) are not given the same GPUs; Node counts an
// assumption only once the cache holds its pod.
func TestLedgerBatchOfReservations(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 4, 81920).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	bestFit := gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	d := gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}
	var got []gpu.Assignment
	for _, uid := range []string{"p0", "p1"} {
		// The same generation: the snapshot did not change.
		n := l.NodeInFlight(node, cache.gen["n"], slices.Values(cache.pods["n"]))
		chosen, fit := bestFit.Place(n, &gpu.Request{Demand: &d})
		if !fit.OK() {
			t.Fatalf("%s: %s", uid, fit.Reasons)
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
	if free := l.NodeInFlight(node, cache.gen["n"], slices.Values(cache.pods["n"])).FreeMilliTotal(); free != 0 {
		t.Errorf("in flight: free milli-GPU %d after two 2-GPU reservations on 4 GPUs, want 0", free)
	}
	if free := cache.view(l, node).FreeMilliTotal(); free != 4000 {
		t.Errorf("Node: free milli-GPU %d before the cache holds the pods, want 4000", free)
	}
	// The next snapshot holds both: each counts once.
	cache.put(gt.MakeGPUPod("p0").UID("p0").Node("n").Obj())
	cache.put(gt.MakeGPUPod("p1").UID("p1").Node("n").Obj())
	if free := cache.view(l, node).FreeMilliTotal(); free != 0 {
		t.Errorf("Node: free milli-GPU %d once the cache holds both, want 0", free)
	}
	if free := l.NodeInFlight(node, cache.gen["n"], slices.Values(cache.pods["n"])).FreeMilliTotal(); free != 0 {
		t.Errorf("in flight: free milli-GPU %d once the cache holds both, want 0 (each counted once)", free)
	}
	// p1 leaves the cache without being forgotten (a simulator removes pods
	// directly): its assumption, made at an older generation, no longer counts.
	cache.remove("p1")
	if free := l.NodeInFlight(node, cache.gen["n"], slices.Values(cache.pods["n"])).FreeMilliTotal(); free != 2000 {
		t.Errorf("in flight: free milli-GPU %d once the cache dropped p1, want 2000", free)
	}
}
