package gpudra

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// orderKey is where a placement plugin leaves the Order of the pod in the
// cycle (WriteOrder).
const orderKey fwk.StateKey = "DeviceOrder" + Name

// Order is the devices a placement policy prefers for the pod of one
// scheduling cycle, per node name, best first. A device is named by its
// driver, pool and device name, as an allocation result names it. Devices
// of a node that the Order does not list keep their place after the listed
// ones. Immutable once written.
type Order map[string][]DeviceName

// DeviceName names one device of a ResourceSlice.
type DeviceName struct{ Driver, Pool, Device string }

// Clone implements fwk.StateData; an Order is never modified.
func (o Order) Clone() fwk.StateData { return o }

// WriteOrder leaves the pod's device order in the cycle state, for
// GPUDynamicResources' PreFilter: a placement plugin calls it in its own
// PreFilter, which must run first (the profile lists it earlier).
func WriteOrder(state fwk.CycleState, order Order) { state.Write(orderKey, order) }

// orderOf is the cycle's Order, or nil.
func orderOf(state fwk.CycleState) Order {
	data, err := state.Read(orderKey)
	if err != nil {
		return nil
	}
	return data.(Order)
}

// orderedManager is the scheduler's DRA manager with the ResourceSlices of
// the nodes in the current Order listed with their devices in that order.
// Claims, classes and the class resolver are the manager's own.
type orderedManager struct {
	fwk.SharedDRAManager
	order atomic.Pointer[Order]
	memo  reorderMemo
}

// ResourceSlices implements fwk.SharedDRAManager.
func (m *orderedManager) ResourceSlices() fwk.ResourceSliceLister { return orderedLister{m} }

// orderedLister lists the manager's slices in the current Order.
type orderedLister struct{ m *orderedManager }

// ListWithDeviceTaintRules implements fwk.ResourceSliceLister.
func (l orderedLister) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	all, err := l.m.SharedDRAManager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	order := l.m.order.Load()
	if order == nil || len(*order) == 0 {
		return all, nil
	}
	return reorder(all, *order, &l.m.memo), nil
}

// reorderMemo keeps the last reordering of each slice: a node's preferred
// devices are often the same from one cycle to the next (the node did not
// change, and pods of the same shape follow each other), and slices are
// never modified, so the reordered copy is handed out again. It keeps one
// entry per slice object, and starts afresh once it holds more than twice
// as many as the listing has slices (slices replaced by newer versions).
type reorderMemo struct {
	mu      sync.Mutex
	entries map[*resourceapi.ResourceSlice]reordered
}

// reordered is a slice's reordering for a node's preference.
type reordered struct {
	prefer []DeviceName
	best   int
	out    *resourceapi.ResourceSlice
}

// devices is reorderDevices through the memo; the caller holds mu.
func (m *reorderMemo) devices(s *resourceapi.ResourceSlice, prefer []DeviceName, listed int) (best int, out *resourceapi.ResourceSlice) {
	if e, ok := m.entries[s]; ok && samePreference(e.prefer, prefer) {
		return e.best, e.out
	}
	if m.entries == nil || len(m.entries) > 2*listed {
		m.entries = make(map[*resourceapi.ResourceSlice]reordered, listed)
	}
	best, out = reorderDevices(s, rankOf(prefer))
	m.entries[s] = reordered{prefer: prefer, best: best, out: out}
	return best, out
}

// samePreference reports whether two preferences list the same devices;
// at once when they are the same list (a placement plugin hands a node's
// unchanged preference out again).
func samePreference(a, b []DeviceName) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0] || slices.Equal(a, b)
}

// Reorder returns the slices with the devices of each node in the order's
// preference: in every slice local to a node the order lists, the listed
// devices come first, in the order's sequence, and the others follow in
// their published order; and such a node's slices of one pool are listed
// with the slice holding the most preferred device first. Slices are
// copied where they change; the listing and its objects are not modified.
// Nothing else changes: names, pools, generations, counters and every
// device's fields are the published ones, so an allocation from the result
// is one from the published slices.
//
// The structured allocator takes the first devices that satisfy a claim,
// trying pools (sorted by driver and pool name), then slices, then devices
// in order; with the preferred devices first, its first fit is the policy's
// choice whenever that choice satisfies the claim, and otherwise the first
// fit of the remaining devices in their published order. Allocator
// implementations that sort the slices of a pool by name (incubating and
// experimental; 1.37 picks incubating by default) see the preference only
// within each slice: the regrouping of a node's slices serves the stable
// allocator.
func Reorder(all []*resourceapi.ResourceSlice, order Order) []*resourceapi.ResourceSlice {
	return reorder(all, order, nil)
}

// reorder is Reorder, through memo when it is not nil. It visits every
// slice of every listing of every claim pod's cycle, so it keeps to one
// look-up per slice where each node has one slice of the driver (as
// drivers publish GPUs), and groups the slices of a pool only on nodes
// that have several.
func reorder(all []*resourceapi.ResourceSlice, order Order, memo *reorderMemo) []*resourceapi.ResourceSlice {
	if memo != nil {
		memo.mu.Lock()
		defer memo.mu.Unlock()
	}
	out := slices.Clone(all)
	best := make([]int, len(out))             // by position: the best rank in the slice
	first := make(map[string]int, len(order)) // each ordered node's first slice
	var again []int                           // the positions of the others
	for i, s := range out {
		if s.Spec.NodeName == nil {
			continue
		}
		node := *s.Spec.NodeName
		prefer, ok := order[node]
		if !ok || len(prefer) == 0 {
			continue
		}
		if memo != nil {
			best[i], out[i] = memo.devices(s, prefer, len(all))
		} else {
			best[i], out[i] = reorderDevices(s, rankOf(prefer))
		}
		if _, seen := first[node]; seen {
			again = append(again, i)
		} else {
			first[node] = i
		}
	}
	// Within each pool of a node, the slice holding the best ranked device
	// first, in the positions the pool's slices had: every other slice
	// stays put. Positions are gathered in ascending order.
	type group struct{ node, driver, pool string }
	at := map[group][]int{}
	for _, i := range again {
		node := *out[i].Spec.NodeName
		if j, ok := first[node]; ok {
			g := group{node, out[j].Spec.Driver, out[j].Spec.Pool.Name}
			at[g] = append(at[g], j)
			delete(first, node)
		}
		g := group{node, out[i].Spec.Driver, out[i].Spec.Pool.Name}
		at[g] = append(at[g], i)
	}
	for _, positions := range at {
		if len(positions) < 2 {
			continue
		}
		group := make([]int, len(positions)) // the positions by their slice's best rank
		copy(group, positions)
		slices.SortStableFunc(group, func(a, b int) int { return cmp.Compare(best[a], best[b]) })
		moved := make([]*resourceapi.ResourceSlice, len(group))
		for j, i := range group {
			moved[j] = out[i]
		}
		for j, i := range positions {
			out[i] = moved[j]
		}
	}
	return out
}

// rankOf ranks each device of a preference by its first place in it.
func rankOf(prefer []DeviceName) map[DeviceName]int {
	rank := make(map[DeviceName]int, len(prefer))
	for r, d := range prefer {
		if _, dup := rank[d]; !dup {
			rank[d] = r
		}
	}
	return rank
}

// notRanked is the rank of a device the order does not list.
const notRanked = int(^uint(0) >> 1)

// reorderDevices returns the slice with its ranked devices first, by rank,
// and the best rank in it; the slice itself when nothing moves.
func reorderDevices(s *resourceapi.ResourceSlice, rank map[DeviceName]int) (best int, out *resourceapi.ResourceSlice) {
	rankOf := func(d *resourceapi.Device) int {
		if r, ok := rank[DeviceName{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name}]; ok {
			return r
		}
		return notRanked
	}
	best = notRanked
	moved := false
	for i := range s.Spec.Devices {
		r := rankOf(&s.Spec.Devices[i])
		best = min(best, r)
		if i > 0 && r < rankOf(&s.Spec.Devices[i-1]) {
			moved = true
		}
	}
	if !moved {
		return best, s
	}
	c := *s // a shallow copy: only the device list is new
	c.Spec.Devices = slices.Clone(s.Spec.Devices)
	slices.SortStableFunc(c.Spec.Devices, func(a, b resourceapi.Device) int { return cmp.Compare(rankOf(&a), rankOf(&b)) })
	return best, &c
}
