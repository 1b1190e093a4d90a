package dra

import (
	"context"
	"fmt"
	"maps"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// stateManager is a modelsManager whose allocated state the test changes
// in place between cycles, as the simulator's DRA manager does.
type stateManager struct {
	modelsManager
	state *structured.AllocatedState
}

func (m *stateManager) ResourceClaims() fwk.ResourceClaimTracker { return stateClaims{m: m} }

type stateClaims struct {
	noClaims
	m *stateManager
}

func (c stateClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	return c.m.state, nil
}

// nothingAllocated is DRA's allocated state with nothing allocated, for a
// test to change in place.
func nothingAllocated() *structured.AllocatedState {
	return &structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// TestDRAViewsFollowAllocations: a node's view of its DRA GPUs is handed
// out again while the allocations on its devices are the same, and made
// anew when one comes or goes there, whole or shared, even when the state
// changes in place and the node's count of allocations stays the same.
// Nodes a and b each publish two GPUs of 81920 MiB (devices gpu-0, gpu-1
// in pools a and b).
func TestDRAViewsFollowAllocations(t *testing.T) {
	const product = "NVIDIA A100-SXM4-80GB"
	state := nothingAllocated()
	m := &stateManager{modelsManager: modelsManager{slices: []*resourceapi.ResourceSlice{twoGPUSlice("a", product), twoGPUSlice("b", product)}}, state: state}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	ctx := context.Background()
	views := func() (a, b *gpu.NodeGPUs) {
		t.Helper()
		cycle, err := r.read(ctx, false)
		if err != nil || cycle == nil {
			t.Fatalf("read: %v, %v", cycle, err)
		}
		return cycle.NodeGPUs("a"), cycle.NodeGPUs("b")
	}
	device := func(node string, i int) structured.DeviceID {
		return structured.MakeDeviceID(gpu.DefaultDRADriver, node, []string{"gpu-0", "gpu-1"}[i])
	}
	share := func(node string, i int, uid string, memory string) (structured.SharedDeviceID, structured.DeviceConsumedCapacity) {
		id := device(node, i)
		shareID := types.UID(uid)
		return structured.MakeSharedDeviceID(id, &shareID),
			structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)})
	}
	free := func(v *gpu.NodeGPUs) [2]int64 { return [2]int64{v.FreeMilli(0), v.FreeMilli(1)} }
	freeMemory := func(v *gpu.NodeGPUs) [2]int64 { return [2]int64{v.FreeMemoryMiB(0), v.FreeMemoryMiB(1)} }

	a1, b1 := views()
	if free(a1) != [2]int64{1000, 1000} || free(b1) != [2]int64{1000, 1000} {
		t.Fatalf("nothing allocated: free %v and %v, want every GPU", free(a1), free(b1))
	}

	// a's gpu-0 allocated whole: a's view is new, b's the same.
	state.AllocatedDevices.Insert(device("a", 0))
	a2, b2 := views()
	if free(a2) != [2]int64{0, 1000} || b2 != b1 {
		t.Errorf("a's gpu-0 allocated: a free %v, want [0 1000]; b's view kept: %t", free(a2), b2 == b1)
	}

	// Nothing changes: both views are handed out again.
	if a3, b3 := views(); a3 != a2 || b3 != b2 {
		t.Errorf("nothing changed, views made anew: a %t, b %t", a3 != a2, b3 != b2)
	}

	// A share of 10Gi (10240 MiB) on b's gpu-1: 81920 − 10240 = 71680 MiB
	// free there.
	id, consumed := share("b", 1, "share-1", "10Gi")
	state.AllocatedSharedDeviceIDs.Insert(id)
	state.AggregatedCapacity.Insert(consumed)
	a4, b4 := views()
	if freeMemory(b4) != [2]int64{81920, 71680} || a4 != a2 {
		t.Errorf("a share on b's gpu-1: b free memory %v, want [81920 71680]; a's view kept: %t", freeMemory(b4), a4 == a2)
	}

	// One allocation on a moves from gpu-0 to gpu-1: the count on a is
	// the same, the view is not.
	state.AllocatedDevices.Delete(device("a", 0))
	state.AllocatedDevices.Insert(device("a", 1))
	if a5, _ := views(); free(a5) != [2]int64{1000, 0} {
		t.Errorf("a's allocation moved to gpu-1: free %v, want [1000 0]", free(a5))
	}

	// A new share of 10Gi on b's gpu-0, counted twice by the first cycle
	// that sees it, as the scheduler's DRA manager counts a claim for a
	// moment between its PreBind's write to the assume cache and its
	// removal from the claims in flight: 81920 − 2 × 10240 = 61440 MiB
	// free in that cycle, and 71680 in the next, which counts it once;
	// the view of that next cycle is kept. The share then goes.
	id0, consumed0 := share("b", 0, "share-0", "10Gi")
	state.AllocatedSharedDeviceIDs.Insert(id0)
	state.AggregatedCapacity.Insert(consumed0)
	state.AggregatedCapacity.Insert(consumed0)
	twice, err := r.read(ctx, false)
	if err != nil || twice == nil {
		t.Fatalf("read: %v, %v", twice, err)
	}
	if b := twice.NodeGPUs("b"); freeMemory(b) != [2]int64{61440, 71680} {
		t.Errorf("a share counted twice: b free memory %v, want [61440 71680]", freeMemory(b))
	}
	// A second goroutine of the same cycle that asked before the first
	// kept its view reads the node again; that does not confirm it.
	twice.views[twice.pub.index["b"]].Store(nil)
	twice.NodeGPUs("b")
	state.AggregatedCapacity.Remove(consumed0)
	_, bOnce := views()
	if freeMemory(bOnce) != [2]int64{71680, 71680} {
		t.Errorf("the share counted once: b free memory %v, want [71680 71680]", freeMemory(bOnce))
	}
	for range 2 {
		if _, b := views(); b != bOnce {
			t.Errorf("b unchanged since: its view made anew")
		}
	}
	state.AllocatedSharedDeviceIDs.Delete(id0)
	state.AggregatedCapacity.Remove(consumed0)

	// b's share replaced by another of 20Gi (20480 MiB) on the same GPU.
	state.AllocatedSharedDeviceIDs.Delete(id)
	state.AggregatedCapacity.Remove(consumed)
	id, consumed = share("b", 1, "share-2", "20Gi")
	state.AllocatedSharedDeviceIDs.Insert(id)
	state.AggregatedCapacity.Insert(consumed)
	if _, b6 := views(); freeMemory(b6) != [2]int64{81920, 61440} {
		t.Errorf("b's share replaced: free memory %v, want [81920 61440]", freeMemory(b6))
	}
}

// TestDRAListingInAnyOrder: a listing of the same slice objects in another
// order (an informer's lister lists them in no fixed order) is the same
// listing: the grouping, each node's view and the census PairFit prices
// with are handed out again, so that the memo of each view keeps its
// answers from one cycle to the next. A new object for one slice makes the
// listing new.
func TestDRAListingInAnyOrder(t *testing.T) {
	const product = "NVIDIA A100-SXM4-80GB"
	a, b := twoGPUSlice("a", product), twoGPUSlice("b", product)
	m := &stateManager{modelsManager: modelsManager{slices: []*resourceapi.ResourceSlice{a, b}}, state: nothingAllocated()}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	ctx := context.Background()
	read := func() *Cycle {
		t.Helper()
		cycle, err := r.read(ctx, false)
		if err != nil || cycle == nil {
			t.Fatalf("read: %v, %v", cycle, err)
		}
		return cycle
	}
	first := read()
	viewA, viewB := first.NodeGPUs("a"), first.NodeGPUs("b")

	m.slices = []*resourceapi.ResourceSlice{b, a}
	second := read()
	if second.pub != first.pub {
		t.Errorf("the same slices listed in another order were grouped anew")
	}
	if second.NodeGPUs("a") != viewA || second.NodeGPUs("b") != viewB {
		t.Errorf("the same slices listed in another order: views made anew (a %t, b %t)",
			second.NodeGPUs("a") != viewA, second.NodeGPUs("b") != viewB)
	}
	if got, want := second.pub.models, first.pub.models; len(got) == 0 || &got[0] != &want[0] {
		t.Errorf("the same slices listed in another order: a new census %v (was %v)", got, want)
	}

	m.slices = []*resourceapi.ResourceSlice{b, twoGPUSlice("a", product)}
	if third := read(); third.pub == first.pub {
		t.Errorf("a new object for a's slice: the old grouping handed out")
	}
}

// TestDRAViewsOfDevicesPublishedTwice: two nodes that publish the same
// device (a malformed listing: the same pool and device names) both show
// an allocation of it, cycle after cycle.
func TestDRAViewsOfDevicesPublishedTwice(t *testing.T) {
	const product = "NVIDIA A100-SXM4-80GB"
	a, b := twoGPUSlice("a", product), twoGPUSlice("b", product)
	b.Spec.Pool.Name = "a" // b's devices are named as a's
	state := &structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
	m := &stateManager{modelsManager: modelsManager{slices: []*resourceapi.ResourceSlice{a, b}}, state: state}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	ctx := context.Background()
	for step, allocated := range []bool{false, true} {
		if allocated {
			state.AllocatedDevices.Insert(structured.MakeDeviceID(gpu.DefaultDRADriver, "a", "gpu-0"))
		}
		cycle, err := r.read(ctx, false)
		if err != nil || cycle == nil {
			t.Fatalf("read: %v, %v", cycle, err)
		}
		want := map[bool]int64{false: 1000, true: 0}[allocated]
		for _, node := range []string{"a", "b"} {
			if got := cycle.NodeGPUs(node).FreeMilli(0); got != want {
				t.Errorf("step %d, node %s: gpu-0 free %d, want %d", step, node, got, want)
			}
		}
	}
}

// TestDRAShareMemo: the shares a listing's cycles remember give every
// node and device what a reader that never saw the cluster computes (the
// node's signature, the devices with a shared allocation), while shares
// come, stay and go cycle after cycle and the listing changes; and the
// memo stays bounded: after a cycle, at most twice its shares and
// shareMemoSlack.
func TestDRAShareMemo(t *testing.T) {
	const product = "NVIDIA A100-SXM4-80GB"
	state := nothingAllocated()
	listing := []*resourceapi.ResourceSlice{twoGPUSlice("a", product), twoGPUSlice("b", product)}
	reader := func() *Reader {
		m := &stateManager{modelsManager: modelsManager{slices: listing}, state: state}
		return &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	}
	// read is what a cycle of r reads: each node's signature, and which
	// of its devices have a shared allocation.
	type nodeRead struct {
		signature uint64
		shared    string
	}
	read := func(r *Reader) (map[string]nodeRead, *Cycle) {
		t.Helper()
		r.manager.(*stateManager).slices = listing
		cycle, err := r.read(context.Background(), false)
		if err != nil || cycle == nil {
			t.Fatalf("read: %v, %v", cycle, err)
		}
		cycle.readOnce.Do(cycle.readAllocations)
		out := map[string]nodeRead{}
		for node, i := range cycle.pub.index {
			out[node] = nodeRead{cycle.signatures[i], fmt.Sprint(cycle.shared[cycle.pub.offsets[i]:cycle.pub.offsets[i+1]])}
		}
		return out, cycle
	}
	newShare := func(node, device, uid string) structured.SharedDeviceID {
		shareID := types.UID(uid)
		return structured.MakeSharedDeviceID(structured.MakeDeviceID(gpu.DefaultDRADriver, node, device), &shareID)
	}
	kept := reader()
	// Ten shares stay on a's gpu-0 throughout; each round the round
	// before's others go and 1500 new ones come on a's or b's gpu-1 by
	// the round's parity. Round 3 adds node c, with shares of its own.
	for i := range 10 {
		state.AllocatedSharedDeviceIDs.Insert(newShare("a", "gpu-0", fmt.Sprintf("staying-%d", i)))
	}
	var churn []structured.SharedDeviceID
	for round := range 6 {
		for _, id := range churn {
			state.AllocatedSharedDeviceIDs.Delete(id)
		}
		churn = churn[:0]
		node := []string{"a", "b"}[round%2]
		if round == 3 {
			listing = append(listing, twoGPUSlice("c", product))
			node = "c"
		}
		for i := range 1500 {
			id := newShare(node, "gpu-1", fmt.Sprintf("round-%d-share-%d", round, i))
			state.AllocatedSharedDeviceIDs.Insert(id)
			churn = append(churn, id)
		}
		want, _ := read(reader())
		for again := range 2 {
			got, cycle := read(kept)
			if !maps.Equal(got, want) {
				t.Errorf("round %d, read %d: %v, want what a new reader reads %v", round, again, got, want)
			}
			n, most := len(cycle.pub.shares.byID), 2*state.AllocatedSharedDeviceIDs.Len()+shareMemoSlack
			if n > most {
				t.Errorf("round %d, read %d: %d shares remembered, want at most %d", round, again, n, most)
			}
			if again == 1 && n == 0 {
				t.Errorf("round %d: nothing remembered after reading the same shares twice", round)
			}
		}
	}
}
