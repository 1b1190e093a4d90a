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

// devices is reorderDevices through the memo.
func (m *reorderMemo) devices(s *resourceapi.ResourceSlice, prefer []DeviceName, listed int) (best int, out *resourceapi.ResourceSlice) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[s]; ok && slices.Equal(e.prefer, prefer) {
		return e.best, e.out
	}
	if m.entries == nil || len(m.entries) > 2*listed {
		m.entries = make(map[*resourceapi.ResourceSlice]reordered, listed)
	}
	best, out = reorderDevices(s, rankOf(prefer))
	m.entries[s] = reordered{prefer: prefer, best: best, out: out}
	return best, out
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

// reorder is Reorder, through memo when it is not nil.
func reorder(all []*resourceapi.ResourceSlice, order Order, memo *reorderMemo) []*resourceapi.ResourceSlice {
	out := slices.Clone(all)
	type group struct{ node, driver, pool string }
	at := map[group][]int{} // positions in out of each node's slices of a pool
	bestOf := make(map[*resourceapi.ResourceSlice]int, len(order))
	for i, s := range out {
		if s.Spec.NodeName == nil {
			continue
		}
		prefer, ok := order[*s.Spec.NodeName]
		if !ok || len(prefer) == 0 {
			continue
		}
		var best int
		var sorted *resourceapi.ResourceSlice
		if memo != nil {
			best, sorted = memo.devices(s, prefer, len(all))
		} else {
			best, sorted = reorderDevices(s, rankOf(prefer))
		}
		out[i] = sorted
		bestOf[sorted] = best
		g := group{*s.Spec.NodeName, s.Spec.Driver, s.Spec.Pool.Name}
		at[g] = append(at[g], i)
	}
	// Within each group, the slice holding the best ranked device first, in
	// the positions the group's slices had: every other slice stays put.
	for _, positions := range at {
		if len(positions) < 2 {
			continue
		}
		group := make([]*resourceapi.ResourceSlice, len(positions))
		for j, i := range positions {
			group[j] = out[i]
		}
		slices.SortStableFunc(group, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(bestOf[a], bestOf[b]) })
		for j, i := range positions {
			out[i] = group[j]
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
