package gpudra

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// preferencesKey is where a placement plugin leaves the Preferences of
// the pod in the cycle (WritePreferences).
const preferencesKey fwk.StateKey = "DevicePreferences" + Name

// Preferences is a placement policy's devices for the pod of one
// scheduling cycle, asked node by node as the scheduler filters the nodes:
// those of a node it prefers, best first. A device is named by its driver,
// pool and device name, as an allocation result names it. Devices of a
// node that the preference does not list keep their place after the
// listed ones.
type Preferences interface {
	// Driver is the driver whose devices the preferences name: only its
	// slices are listed for reordering; "" stands for every driver.
	Driver() string
	// Of is the devices preferred on the node, best first; none where the
	// policy prefers none (DRA then decides there alone, first fit). It is
	// called at most once per node and cycle by this plugin, from the
	// node's Filter or, where the allocator needs every node arranged
	// first, from PreFilter, concurrently for different nodes; Score reads
	// the same choice.
	Of(ctx context.Context, node fwk.NodeInfo) []DeviceName
}

// Order is Preferences written out for every node, by node name: a
// placement made before the cycle, or a test's. Immutable once written.
type Order map[string][]DeviceName

// Driver implements Preferences: an order may name any driver's devices.
func (o Order) Driver() string { return "" }

// Of implements Preferences.
func (o Order) Of(_ context.Context, node fwk.NodeInfo) []DeviceName { return o[node.Node().Name] }

// DeviceName names one device of a ResourceSlice.
type DeviceName struct{ Driver, Pool, Device string }

// preferencesData holds the cycle's Preferences in the cycle state.
type preferencesData struct{ Preferences }

// Clone implements fwk.StateData; Preferences answer for one cycle and
// are shared by its clones.
func (d preferencesData) Clone() fwk.StateData { return d }

// WritePreferences leaves the pod's device preferences in the cycle state,
// for GPUDynamicResources: a placement plugin calls it in its own
// PreFilter, which must run first (the profile lists it earlier).
func WritePreferences(state fwk.CycleState, p Preferences) {
	state.Write(preferencesKey, preferencesData{p})
}

// preferencesOf is the cycle's Preferences, or nil.
func preferencesOf(state fwk.CycleState) Preferences {
	data, err := state.Read(preferencesKey)
	if err != nil {
		return nil
	}
	return data.(preferencesData).Preferences
}

// orderedManager is the scheduler's DRA manager whose listing of the
// ResourceSlices, while a PreFilter hands it the cycle's Preferences, has
// a twin of every slice of their driver local to a node (twinListing), in
// which Filter lists the node's devices in the preferred order. Claims,
// classes and the class resolver are the manager's own.
type orderedManager struct {
	fwk.SharedDRAManager
	prefs atomic.Pointer[Preferences]
	// listed is the twin listing made while prefs was set, listed again
	// if DynamicResources lists twice, for the PreFilter that set it to
	// keep for the cycle's Filter.
	listed atomic.Pointer[twinListing]
	memo   reorderMemo
	// kept is the last twin listing and the driver it covers, whose twins
	// the next listing of the same slices takes again (twinListing.again).
	keptMu     sync.Mutex
	kept       *twinListing
	keptDriver string
}

// ResourceSlices implements fwk.SharedDRAManager.
func (m *orderedManager) ResourceSlices() fwk.ResourceSliceLister { return orderedLister{m} }

// orderedLister lists the manager's slices, with twins while a PreFilter
// hands it Preferences.
type orderedLister struct{ m *orderedManager }

// ListWithDeviceTaintRules implements fwk.ResourceSliceLister.
func (l orderedLister) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	all, err := l.m.SharedDRAManager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	prefs := l.m.prefs.Load()
	if prefs == nil {
		return all, nil
	}
	if twins := l.m.listed.Load(); twins != nil {
		return twins.listing, nil // listed again in the same PreFilter
	}
	twins := l.m.twins(all, (*prefs).Driver())
	l.m.listed.Store(twins)
	return twins.listing, nil
}

// twins is the twin listing of all for the driver's slices: the kept
// listing's twins again when all lists the same slices, else new ones.
// It is called in PreFilter, when the last cycle is over.
func (m *orderedManager) twins(all []*resourceapi.ResourceSlice, driver string) *twinListing {
	m.keptMu.Lock()
	defer m.keptMu.Unlock()
	var twins *twinListing
	if m.kept != nil && m.keptDriver == driver {
		twins = m.kept.again(all)
	}
	if twins == nil {
		twins = newTwinListing(all, ofDriver(driver), &m.memo)
	}
	m.kept, m.keptDriver = twins, driver
	return twins
}

// ofDriver admits the slices of a driver, or of every driver for "".
func ofDriver(driver string) func(*resourceapi.ResourceSlice) bool {
	return func(s *resourceapi.ResourceSlice) bool { return driver == "" || s.Spec.Driver == driver }
}

// reorderMemo keeps the last reordering of each slice's devices: a node's
// preferred devices are often the same from one cycle to the next (the
// node did not change, and pods of the same shape follow each other), and
// slices are never modified, so the reordered list is handed out again. It
// keeps one entry per slice object, and starts afresh once it holds more
// than twice as many as the listing has slices (slices replaced by newer
// versions).
type reorderMemo struct {
	mu      sync.Mutex
	entries map[*resourceapi.ResourceSlice]reordered
}

// reordered is a slice's devices reordered for a node's preference.
type reordered struct {
	prefer  []DeviceName
	devices []resourceapi.Device
}

// devices is the slice's devices in the preference's order (byRank),
// through the memo when it is not nil.
func (m *reorderMemo) devices(s *resourceapi.ResourceSlice, prefer []DeviceName, listed int) []resourceapi.Device {
	reorder := func() []resourceapi.Device {
		return byRank(s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Devices, rankOf(prefer))
	}
	if m == nil {
		return reorder()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[s]; ok && samePreference(e.prefer, prefer) {
		return e.devices
	}
	if m.entries == nil || len(m.entries) > 2*listed {
		m.entries = make(map[*resourceapi.ResourceSlice]reordered, listed)
	}
	devices := reorder()
	m.entries[s] = reordered{prefer: prefer, devices: devices}
	return devices
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

// byRank returns devices of a driver's pool with the ranked ones first, by
// rank, the others after them in their order: devices itself when nothing
// moves, else a sorted copy.
func byRank(driver, pool string, devices []resourceapi.Device, rank map[DeviceName]int) []resourceapi.Device {
	rankOf := func(d *resourceapi.Device) int {
		if r, ok := rank[DeviceName{Driver: driver, Pool: pool, Device: d.Name}]; ok {
			return r
		}
		return notRanked
	}
	moved := false
	for i := 1; i < len(devices) && !moved; i++ {
		moved = rankOf(&devices[i]) < rankOf(&devices[i-1])
	}
	if !moved {
		return devices
	}
	out := slices.Clone(devices)
	slices.SortStableFunc(out, func(a, b resourceapi.Device) int { return cmp.Compare(rankOf(&a), rankOf(&b)) })
	return out
}
