package gpudra

import (
	"cmp"
	"context"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// twinListing is a cycle's listing of the ResourceSlices in which every
// slice it covers (those of the preferences' driver local to one node) is
// a twin: a shallow copy of the listed slice, made in PreFilter and kept
// for later cycles while the same slices are listed (twinSet), whose
// device list is set to the node's preferred order (arrange) before
// DynamicResources allocates there. Where the allocator allows it
// (arrangeInFilter), a node's twins are arranged in the node's Filter, so
// the placement that chooses a node's devices runs on the nodes the
// scheduler filters (at 5000 nodes about a tenth of them,
// percentageOfNodesToScore), not on every node that publishes GPUs.
//
// Why the allocator, built in PreFilter from the listing, then sees each
// node's devices in order and no Filter races another: after PreFilter
// only the twins' device lists change, a node's only in that node's Filter
// and before its allocation (once per cycle); and the allocator reads the
// devices of a slice only when it allocates on a node of the slice's pool,
// and of other slices only their node, driver and pool (name and
// generation), which no Filter writes. Otherwise (prepare) every node is
// arranged in PreFilter. The listed slices themselves are never modified.
type twinListing struct {
	listing []*resourceapi.ResourceSlice
	*twinSet
	// at is each twin's place in listing; arranged is by a node's last
	// twin.
	at       []int32
	arranged []sync.Once
	memo     *reorderMemo
}

// twinSet is the twins of the slices of one listing, kept for the next
// listings of the same slice objects in whatever order (again): the
// scheduler's DRA manager lists the same slices, in no fixed order, from
// one cycle to the next until a driver publishes anew, and copying every
// slice each cycle costs more at 5000 nodes than the rest of the listing.
// Between cycles, only the device lists of the twins the last cycle
// arranged (moved) differ from their originals.
type twinSet struct {
	// twins and originals are by twin number; prev is the twin of the
	// same node listed before it when the set was made, or -1.
	twins     []resourceapi.ResourceSlice
	originals []*resourceapi.ResourceSlice
	prev      []int32
	// last is each covered node's last twin; several is the last twin of
	// each node with several.
	last    map[string]int32
	several []int32
	// moved is by twin: its devices are not its original's. A twin's
	// entry is written by the arrangement of its node only.
	moved []bool
	// index is every listed slice's twin, or -1 for a slice not covered;
	// made by the first again.
	index map[*resourceapi.ResourceSlice]int32
	// poolsOfOneNode is set when every twin's pool is named after its
	// node and every slice it covers is local to a node, so that no pool
	// spans nodes.
	poolsOfOneNode bool
}

// newTwinListing lists all with a twin of each slice local to a node that
// covers admits, each node's slices of one pool listed by name in the
// places they had. memo, when not nil, keeps reordered device lists from
// cycle to cycle.
func newTwinListing(all []*resourceapi.ResourceSlice, covers func(*resourceapi.ResourceSlice) bool, memo *reorderMemo) *twinListing {
	n := 0
	for _, s := range all {
		if s.Spec.NodeName != nil && covers(s) {
			n++
		}
	}
	set := &twinSet{
		twins:          make([]resourceapi.ResourceSlice, n),
		originals:      make([]*resourceapi.ResourceSlice, n),
		prev:           make([]int32, n),
		last:           make(map[string]int32, n),
		moved:          make([]bool, n),
		poolsOfOneNode: true,
	}
	l := &twinListing{
		listing:  slices.Clone(all),
		twinSet:  set,
		at:       make([]int32, n),
		arranged: make([]sync.Once, n),
		memo:     memo,
	}
	t := int32(0)
	for i, s := range all {
		if !covers(s) {
			continue
		}
		if s.Spec.NodeName == nil {
			// A slice of no one node may name a node's pool: the allocator
			// then reads that pool's twins when it allocates elsewhere.
			set.poolsOfOneNode = false
			continue
		}
		set.twins[t], set.originals[t], l.at[t] = *s, s, int32(i)
		l.listing[i] = &set.twins[t]
		node := *s.Spec.NodeName
		set.poolsOfOneNode = set.poolsOfOneNode && s.Spec.Pool.Name == node
		set.prev[t] = -1
		if j, ok := set.last[node]; ok {
			set.prev[t] = j
			if set.prev[j] < 0 {
				set.several = append(set.several, t)
			}
		}
		set.last[node] = t
		t++
	}
	for k, t := range set.several {
		set.several[k] = set.last[*set.originals[t].Spec.NodeName]
	}
	l.listPoolsByName()
	return l
}

// again is the listing of all, a listing of the same slice objects as l's
// in any order, with l's twins, their devices reset to their originals'
// (a new cycle's listing); nil when all lists other slices. The cycle of
// l must be over: its allocator reads the twins.
func (l *twinListing) again(all []*resourceapi.ResourceSlice) *twinListing {
	set := l.twinSet
	if len(all) != len(l.listing) {
		return nil
	}
	if set.index == nil {
		set.index = make(map[*resourceapi.ResourceSlice]int32, len(l.listing))
		for _, s := range l.listing {
			set.index[s] = -1
		}
		for t, at := range l.at {
			delete(set.index, l.listing[at])
			set.index[set.originals[t]] = int32(t)
		}
	}
	next := &twinListing{
		listing:  make([]*resourceapi.ResourceSlice, len(all)),
		twinSet:  set,
		at:       make([]int32, len(set.twins)),
		arranged: make([]sync.Once, len(set.twins)),
		memo:     l.memo,
	}
	for i, s := range all {
		t, ok := set.index[s]
		switch {
		case !ok:
			return nil
		case t < 0:
			next.listing[i] = s
		default:
			next.listing[i], next.at[t] = &set.twins[t], int32(i)
		}
	}
	for t, moved := range set.moved {
		if moved {
			set.twins[t].Spec.Devices, set.moved[t] = set.originals[t].Spec.Devices, false
		}
	}
	next.listPoolsByName()
	return next
}

// nodeTwins is the twins of the node whose last twin is last, in the order
// of the listing that made the set.
func (l *twinListing) nodeTwins(last int32) []int32 {
	var out []int32
	for t := last; t >= 0; t = l.prev[t] {
		out = append(out, t)
	}
	slices.Reverse(out)
	return out
}

// pools groups a node's twins by pool and generation, each group in the
// order of nodeTwins: while a driver republishes a pool, slices of two
// generations may be listed, and the allocator takes the newest only.
func (l *twinListing) pools(twins []int32) [][]int32 {
	type poolID struct {
		driver, pool string
		generation   int64
	}
	var ids []poolID
	var out [][]int32
	for _, t := range twins {
		id := poolID{l.twins[t].Spec.Driver, l.twins[t].Spec.Pool.Name, l.twins[t].Spec.Pool.Generation}
		k := slices.Index(ids, id)
		if k < 0 {
			ids, out = append(ids, id), append(out, nil)
			k = len(ids) - 1
		}
		out[k] = append(out[k], t)
	}
	return out
}

// listPoolsByName lists the twins of each pool of a node with several by
// slice name, in the places the pool's slices had: the order in which the
// newer allocators (incubating, experimental) take a pool's slices, which
// sort them by name, and so the stable one, which keeps the listing's
// order, takes them in the same order.
func (l *twinListing) listPoolsByName() {
	for _, last := range l.several {
		for _, pool := range l.pools(l.nodeTwins(last)) {
			l.listPoolByName(pool)
		}
	}
}

// listPoolByName lists the twins of one pool by slice name in the places
// they have.
func (l *twinListing) listPoolByName(pool []int32) {
	places := make([]int32, len(pool))
	for k, t := range pool {
		places[k] = l.at[t]
	}
	slices.Sort(places) // a kept set's twins are in the order of its first listing
	slices.SortStableFunc(pool, func(a, b int32) int { return cmp.Compare(l.twins[a].Name, l.twins[b].Name) })
	for k, t := range pool {
		l.at[t] = places[k]
		l.listing[places[k]] = &l.twins[t]
	}
}

// prepare arranges every node's twins now, before any Filter, unless
// inFilter says the cycle's allocator reads a slice's devices only on the
// nodes of its pool and no pool spans nodes (arrangeInFilter): then each
// node's Filter arranges its own.
func (l *twinListing) prepare(ctx context.Context, inFilter bool, nodes []fwk.NodeInfo, prefs Preferences, parallelizer fwk.Parallelizer) {
	if inFilter && l.poolsOfOneNode {
		return
	}
	parallelizer.Until(ctx, len(nodes), func(i int) { l.arrange(ctx, nodes[i], prefs) }, Name)
}

// arrange lists the node's devices in its preferred order, once per cycle:
// it asks prefs for them and arranges the node's twins. Nodes without
// twins are left as listed.
func (l *twinListing) arrange(ctx context.Context, node fwk.NodeInfo, prefs Preferences) {
	last, ok := l.last[node.Node().Name]
	if !ok {
		return
	}
	l.arranged[last].Do(func() {
		if prefer := prefs.Of(ctx, node); len(prefer) > 0 {
			l.arrangeTwins(last, prefer)
		}
	})
}

// arrangeTwins sets the device lists of a node's twins to the preferred
// order: in each slice, the preferred devices first, in the preference's
// sequence, and the others after them in published order. Where the node
// has several slices of one pool that list devices (not shared counters),
// the pool's devices are ordered as one list, which fills its slices in
// the order the allocator takes them (by name), each with as many devices
// as it publishes: a pool's devices are the same whichever of its slices
// lists them.
func (l *twinListing) arrangeTwins(last int32, prefer []DeviceName) {
	if l.prev[last] < 0 { // one slice on the node: the common case
		l.twins[last].Spec.Devices, l.moved[last] = l.memo.devices(l.originals[last], prefer, len(l.listing)), true
		return
	}
	rank := rankOf(prefer)
	for _, pool := range l.pools(l.nodeTwins(last)) {
		var holders []int32 // the pool's twins that list devices
		for _, t := range pool {
			if len(l.twins[t].Spec.SharedCounters) == 0 {
				holders = append(holders, t)
			}
		}
		if len(holders) < 2 {
			for _, t := range holders {
				l.twins[t].Spec.Devices, l.moved[t] = l.memo.devices(l.originals[t], prefer, len(l.listing)), true
			}
			continue
		}
		slices.SortStableFunc(holders, func(a, b int32) int { return cmp.Compare(l.twins[a].Name, l.twins[b].Name) })
		var devices []resourceapi.Device
		for _, t := range holders {
			devices = append(devices, l.originals[t].Spec.Devices...)
		}
		spec := &l.twins[holders[0]].Spec
		devices = byRank(spec.Driver, spec.Pool.Name, devices, rank)
		for _, t := range holders {
			n := len(l.originals[t].Spec.Devices)
			l.twins[t].Spec.Devices, devices, l.moved[t] = devices[:n:n], devices[n:], true
		}
	}
}

// Reorder returns the slices as the allocator sees them once every node
// the order lists is filtered: each such node's slices are twins (copies
// of the listed objects) whose devices are in the order's preference, as
// arrangeTwins lists them. Other slices are the listed objects, and the
// listing and its objects are not modified. Every device stays in its
// pool and generation with its published fields, and names, counters and
// node selection are the published ones, so an allocation from the
// result is one from the published slices.
//
// The structured allocator takes the first devices that satisfy a claim,
// trying pools, then slices (by name, or in listed order for the stable
// implementation), then devices in order; with the preferred devices
// first, its first fit is the policy's choice whenever that choice
// satisfies the claim, and otherwise the first fit of the remaining
// devices in their published order.
func Reorder(all []*resourceapi.ResourceSlice, order Order) []*resourceapi.ResourceSlice {
	return reorder(all, order, nil)
}

// reorder is Reorder, through memo when it is not nil.
func reorder(all []*resourceapi.ResourceSlice, order Order, memo *reorderMemo) []*resourceapi.ResourceSlice {
	listed := func(s *resourceapi.ResourceSlice) bool {
		return s.Spec.NodeName != nil && len(order[*s.Spec.NodeName]) > 0
	}
	l := newTwinListing(all, listed, memo)
	for node, last := range l.last {
		l.arrangeTwins(last, order[node])
	}
	return l.listing
}
