package dra

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
)

// draKey is where Placer.Read leaves the cycle's view of DRA, for the
// placement plugin and the profile's other gpusched plugins (dragpus).
const draKey = dragpus.StateKey

// Cycle is what DRA looks like to one scheduling cycle: the GPUs the
// configured driver publishes, per node, and what DRA has allocated
// (allocated claims and claims in flight). It is read once per cycle,
// because both listings are cluster-wide, and not modified but for the
// views it remembers (viewOf). allocated is what the DRA manager handed
// out, which a manager may change in place in Reserve (the simulator's
// does); the views are read in PreFilter, Filter and Score, before it.
type Cycle struct {
	nodes map[string]*gpu.DRAInventory
	// devices are the driver's devices on each node (see allocatedOn).
	devices map[string][]draDevice
	// onNode and nonLocalSlices are as in publishedGPUs.
	onNode         map[string][]*resourceapi.ResourceSlice
	nonLocalSlices bool
	// shared says which devices of the nodes pub indexes, node after node
	// (pub.offsets), have at least one shared allocation, and signatures
	// sums up the allocations on each node, by its index in pub; both read
	// from allocated on first use (readAllocations).
	readOnce   sync.Once
	shared     []bool
	signatures []uint64
	// slices and allocated are what was read, for the structured allocator
	// (see preScoreClaims).
	slices    []*resourceapi.ResourceSlice
	allocated *structured.AllocatedState
	// gpuMapped: a DeviceClass maps nvidia.com/gpu (KEP-5004), so nodes
	// without allocatable nvidia.com/gpu serve it through DRA.
	gpuMapped bool
	// held is the nodes where claims hold GPUs of the driver (heldByDRA),
	// read for pods that ask for GPUs by annotation; nil otherwise.
	held sets.Set[string]
	// pub is the listing nodes and devices come from, with the last view
	// of each node; views are this cycle's, by the node's index in pub
	// (viewOf).
	pub   *publishedGPUs
	views []atomic.Pointer[gpu.NodeGPUs]
	// reader is what read the cycle, for the claims ClaimDemand reads.
	reader *Reader
	// seq numbers the reader's cycles (viewOf confirms a view only in a
	// cycle after the one that made it).
	seq uint64
}

// Clone implements fwk.StateData; Cycle is never modified (but for the
// views it remembers).
func (s *Cycle) Clone() fwk.StateData { return s }

// Reader reads the configured driver's GPUs and allocations through the
// scheduler's shared DRA manager: the objects the DynamicResources plugin
// allocates from, including its claims in flight, and no informer of our own.
type Reader struct {
	// owner is the name of the placement plugin it reads for: where that
	// plugin sits in the profile decides whether DRA allocates its choice
	// (choosesDRADevices), and its logs and parallel work are named by it.
	owner   string
	manager fwk.SharedDRAManager
	src     gpu.DRASource
	// inventories maps a node name to its last *memoInventory.
	inventories sync.Map
	// last is the last listing's grouping (see published), and lastCycle
	// the last cycle read whole, whose room draFleet counts: nil before
	// the first and once a read finds no GPUs of the driver; a read that
	// fails leaves the one before.
	last      atomic.Pointer[publishedGPUs]
	lastCycle atomic.Pointer[Cycle]
	// cycles counts the cycles read (Cycle.seq).
	cycles atomic.Uint64
	// classes maps "node/class" to the node's last *classDevices.
	classes sync.Map
	// selections maps an askSelector's key to its last *selectionSet
	// (select.go); selectionCount bounds the selections they hold.
	selections     sync.Map
	selectionCount atomic.Int64
	// models maps an askSelector's key to its last *askModels;
	// modelCount bounds it as selectionCount bounds selections.
	models     sync.Map
	modelCount atomic.Int64
	recorder   func(slice *resourceapi.ResourceSlice, message string)
	// features and celCache configure the structured allocator exactly as
	// the DynamicResources plugin configures its own, from the feature
	// gates, so that predictions use the same implementation.
	features structured.Features
	celCache *cel.Cache
}

// memoInventory is a node's inventory and the slices it was read from.
type memoInventory struct {
	slices  []*resourceapi.ResourceSlice
	inv     *gpu.DRAInventory
	devices []draDevice
}

// draDevice is one device of the driver, named as the engine and as the
// allocated state name it, with the inventory position of its GPU (the
// GPU itself, or the one a partition is part of; -1 for a device the
// inventory does not read).
type draDevice struct {
	id  gpu.DRADeviceID
	key structured.DeviceID
	pos int
}

// NewReader is the reader for the placement plugin named owner; nil when
// DRA is disabled in args or the scheduler has no DRA manager (a framework
// built without one): the plugin then behaves as it does without DRA.
func NewReader(args config.DRA, h fwk.Handle, owner string) *Reader {
	if !args.Enabled || h.SharedDRAManager() == nil {
		return nil
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	r := &Reader{
		owner:    owner,
		manager:  h.SharedDRAManager(),
		src:      gpu.DRASource{Driver: args.Driver},
		features: dynamicresources.AllocatorFeatures(fts),
		celCache: cel.NewCache(10, cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity, EnableListTypeAttributes: fts.EnableDRAListTypeAttributes}),
	}
	for _, name := range args.GroupAttributes {
		r.src.GroupAttributes = append(r.src.GroupAttributes, resourceapi.QualifiedName(name))
	}
	r.recorder = func(slice *resourceapi.ResourceSlice, message string) {
		if recorder := h.EventRecorder(); recorder != nil {
			recorder.Eventf(slice, nil, v1.EventTypeWarning, "InvalidGPUDevices", "Scheduling", "%s", message)
		}
	}
	return r
}

// read is the cycle's view of DRA; nil when no node publishes GPUs of the
// driver (and, withHeld, no claim holds GPUs of the driver on any node), so
// that clusters without them pay one listing (two withHeld) per GPU pod.
func (r *Reader) read(ctx context.Context, withHeld bool) (*Cycle, error) {
	all, err := r.manager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	pub := r.published(ctx, all)
	var held sets.Set[string]
	if withHeld {
		if held, err = r.heldByDRA(); err != nil {
			return nil, err
		}
	}
	if len(pub.nodes) == 0 && held.Len() == 0 {
		r.lastCycle.Store(nil)
		return nil, nil
	}
	cycle := &Cycle{nodes: pub.nodes, devices: pub.devices, onNode: pub.onNode, nonLocalSlices: pub.nonLocalSlices, slices: all, held: held,
		pub: pub, views: make([]atomic.Pointer[gpu.NodeGPUs], len(pub.index)), reader: r, seq: r.cycles.Add(1)}
	if cycle.allocated, err = r.gather(ctx); err != nil {
		return nil, err
	}
	if resolver := r.manager.DeviceClassResolver(); resolver != nil {
		cycle.gpuMapped = resolver.GetDeviceClass(gpu.ResourceGPU) != nil
	}
	r.lastCycle.Store(cycle)
	return cycle, nil
}

// publishedGPUs is what one listing of the ResourceSlices publishes: the
// driver's GPUs and devices per node. Cycles share it; it is immutable but
// for what it remembers (lastViews, empties, shares).
type publishedGPUs struct {
	// slices is the listing grouped; listed holds each of its slices.
	slices  []*resourceapi.ResourceSlice
	listed  map[*resourceapi.ResourceSlice]struct{}
	nodes   map[string]*gpu.DRAInventory
	devices map[string][]draDevice
	// onNode are every driver's slices local to each node; nonLocalSlices
	// says that some slice is not local to one node (see classDevicesOf).
	onNode         map[string][]*resourceapi.ResourceSlice
	nonLocalSlices bool
	// index numbers the nodes of nodes, and invs holds their inventories
	// by that number; lastViews[index[node]] is the last view of the node's
	// GPUs with DRA's allocations (viewOf), and chosen[index[node]] the
	// last devices named for a choice there (devicesAt).
	index  map[string]int
	invs   []*gpu.DRAInventory
	chosen []atomic.Pointer[chosenDevices]
	// offsets[index[node]] is where the node's devices begin when the
	// devices of all indexed nodes are numbered node after node, and flat
	// is where each device is (readAllocations).
	offsets []int
	flat    map[structured.DeviceID]deviceAt
	// shares remembers where each shared allocation the cycles read is,
	// with its hash (readAllocations).
	shares shareMemo
	// shared marks, by index, the nodes that publish a device another node
	// publishes too (a malformed listing): flat names one of them, so
	// their views are made anew every cycle.
	shared    []bool
	lastViews []atomic.Pointer[draView]
	// empties are the nodes' GPUs with nothing allocated, by index, made
	// on first use (EmptyNodeGPUs).
	empties []atomic.Pointer[gpu.NodeGPUs]
	// models counts the GPUs of nodes by model (draFleet).
	models gpu.ModelGPUs
}

// deviceAt is where a device is in a listing: its node's index, and its
// number when the devices of all indexed nodes are numbered node after
// node.
type deviceAt struct{ node, device int }

// published groups a listing of the slices by node and reads each node's
// inventory, or returns the last grouping when the listing holds the same
// slice objects, in any order: slices rarely change, every GPU pod's cycle
// lists them, and an informer's lister lists them in no fixed order. A
// node's slices are grouped in name order, so that a node's group is the
// same from one listing of its slices to the next (what the inventories,
// class devices and selections remember are compared by their slices).
func (r *Reader) published(ctx context.Context, all []*resourceapi.ResourceSlice) *publishedGPUs {
	if last := r.last.Load(); last != nil && last.lists(all) {
		return last
	}
	byNode := map[string][]*resourceapi.ResourceSlice{}
	pub := &publishedGPUs{slices: all, listed: make(map[*resourceapi.ResourceSlice]struct{}, len(all)), onNode: map[string][]*resourceapi.ResourceSlice{}}
	for _, s := range all {
		pub.listed[s] = struct{}{}
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			pub.nonLocalSlices = true
			continue
		}
		pub.onNode[*s.Spec.NodeName] = append(pub.onNode[*s.Spec.NodeName], s)
		if s.Spec.Driver == r.src.Driver {
			byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], s)
		}
	}
	for _, group := range []map[string][]*resourceapi.ResourceSlice{pub.onNode, byNode} {
		for _, nodeSlices := range group {
			slices.SortStableFunc(nodeSlices, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
		}
	}
	pub.nodes, pub.devices = make(map[string]*gpu.DRAInventory, len(byNode)), make(map[string][]draDevice, len(byNode))
	pub.index = make(map[string]int, len(byNode))
	pub.invs = make([]*gpu.DRAInventory, 0, len(byNode))
	inventories := make([]*gpu.Inventory, 0, len(byNode))
	for node, nodeSlices := range byNode {
		m := r.inventory(ctx, node, nodeSlices)
		pub.nodes[node], pub.devices[node] = m.inv, m.devices
		pub.index[node] = len(pub.index)
		pub.invs = append(pub.invs, m.inv)
		inventories = append(inventories, m.inv.Inventory)
	}
	pub.models = gpu.CountModels(inventories)
	pub.offsets = make([]int, len(pub.index)+1)
	for node, i := range pub.index {
		pub.offsets[i+1] = len(pub.devices[node])
	}
	for i := range len(pub.index) {
		pub.offsets[i+1] += pub.offsets[i]
	}
	pub.flat = make(map[structured.DeviceID]deviceAt, pub.offsets[len(pub.index)])
	pub.shared = make([]bool, len(pub.index))
	for node, i := range pub.index {
		for j, dev := range pub.devices[node] {
			if other, dup := pub.flat[dev.key]; dup {
				pub.shared[other.node], pub.shared[i] = true, true
			}
			pub.flat[dev.key] = deviceAt{node: i, device: pub.offsets[i] + j}
		}
	}
	pub.lastViews = make([]atomic.Pointer[draView], len(pub.index))
	pub.chosen = make([]atomic.Pointer[chosenDevices], len(pub.index))
	pub.empties = make([]atomic.Pointer[gpu.NodeGPUs], len(pub.index))
	r.last.Store(pub)
	return pub
}

// lists reports whether a listing holds the slice objects pub grouped,
// in whatever order. A listing holds each slice once, so the same count
// and every slice among pub's is the same set.
func (pub *publishedGPUs) lists(all []*resourceapi.ResourceSlice) bool {
	if len(all) != len(pub.slices) {
		return false
	}
	for _, s := range all {
		if _, ok := pub.listed[s]; !ok {
			return false
		}
	}
	return true
}

// inventory reads a node's GPUs from its slices, again only when the slices
// changed. Each problem is logged, and reported once per slice version in a
// Warning event on the slice.
func (r *Reader) inventory(ctx context.Context, node string, nodeSlices []*resourceapi.ResourceSlice) *memoInventory {
	if m, ok := r.inventories.Load(node); ok && slices.Equal(m.(*memoInventory).slices, nodeSlices) {
		return m.(*memoInventory)
	}
	inv, problems := gpu.InventoryFromSlices(node, nodeSlices, r.src)
	m := &memoInventory{slices: nodeSlices, inv: inv}
	for _, s := range nodeSlices {
		for i := range s.Spec.Devices {
			name := s.Spec.Devices[i].Name
			dev := draDevice{
				id:  gpu.DRADeviceID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: name},
				key: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, name),
				pos: -1,
			}
			if pos, _, found := inv.Position(dev.id); found {
				dev.pos = pos
			}
			m.devices = append(m.devices, dev)
		}
	}
	r.inventories.Store(node, m)
	bySlice := map[string][]string{}
	for _, p := range problems {
		r.logger(ctx).Info("Skipped a GPU device attribute", "node", node, "resourceSlice", p.Slice, "field", p.Field, "reason", p.Reason)
		bySlice[p.Slice] = append(bySlice[p.Slice], p.Field+": "+p.Reason)
	}
	for _, s := range nodeSlices {
		if msgs := bySlice[s.Name]; len(msgs) > 0 {
			r.recorder(s, "gpusched skipped what it cannot read: "+strings.Join(msgs, "; "))
		}
	}
	return m
}

// gather is DRA's allocated state. The tracker may report a concurrent
// modification of its claims; it is asked again, as the DynamicResources
// plugin does, for up to 5 seconds.
func (r *Reader) gather(ctx context.Context) (*structured.AllocatedState, error) {
	var st *structured.AllocatedState
	err := wait.PollUntilContextTimeout(ctx, time.Microsecond, 5*time.Second, true, func(context.Context) (bool, error) {
		var err error
		st, err = r.manager.ResourceClaims().GatherAllocatedState()
		if err != nil && strings.Contains(err.Error(), "conflicting concurrent modification") {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("gathering allocated DRA devices: %w", err)
	}
	if st == nil {
		st = &structured.AllocatedState{}
	}
	return st, nil
}

// deviceTaken is what DRA's allocated state says of one device: allocated
// whole, allocated as one of several shares, and the memory its shares
// consume together (MiB, rounded up).
type deviceTaken struct {
	exclusive, shared bool
	memoryMiB         int64
}

// What DRA has allocated on a node changes only when an allocation there
// comes or goes, while every cycle of a claim pod reads the devices of
// every node (the device choice places the pod on each). So a cycle reads
// the allocated state once, in one pass over the allocations
// (readAllocations), which gives each node a signature of the allocations
// on its devices; a node whose signature and inventory are those of its
// last view gets that view again (viewOf), once a cycle after the one that
// made it has confirmed it, and only the other nodes look their devices up
// (takenOn).

// allocationSeed seeds the signatures' hashes.
var allocationSeed = maphash.MakeSeed()

// readAllocations reads DRA's allocated state onto the nodes the listing
// indexes: which devices have a shared allocation (the state names each
// share, not each device), and each node's signature, the sum of the
// hashes of the devices allocated whole and of the shares on it. A device
// is hashed by its interned name, which the listing keeps alive; a share
// by its share ID's text as well, since the interned ID of a share that is
// gone may be reused for a new one. Where each share is, and its hash, are
// remembered per listing (shareMemo).
func (c *Cycle) readAllocations() {
	c.shared = make([]bool, c.pub.offsets[len(c.pub.offsets)-1])
	c.signatures = make([]uint64, len(c.pub.index))
	for id := range c.allocated.AllocatedDevices {
		if at, ok := c.pub.flat[id]; ok {
			c.signatures[at.node] += maphash.Comparable(allocationSeed, id)
		}
	}
	shares := &c.pub.shares
	shares.mu.Lock()
	defer shares.mu.Unlock()
	ids := c.allocated.AllocatedSharedDeviceIDs
	if shares.byID == nil {
		shares.byID = make(map[structured.SharedDeviceID]shareAt, len(ids))
	}
	for id := range ids {
		s, ok := shares.byID[id]
		if !ok {
			if s.at, s.found = c.pub.flat[id.GetDeviceID()]; s.found {
				s.hash = maphash.Comparable(allocationSeed, id.GetDeviceID()) ^ maphash.String(allocationSeed, id.ShareID.String())
			}
			shares.byID[id] = s
		}
		if s.found {
			c.shared[s.at.device] = true
			c.signatures[s.at.node] += s.hash
		}
	}
	if len(shares.byID) > 2*len(ids)+shareMemoSlack {
		shares.byID = nil
	}
}

// shareMemo maps each shared allocation a listing's cycles read to where
// its device is in the listing and its hash in the signatures. Both are a
// function of the allocation's names and of the listing, which owns the
// memo, and the map's keys keep the interned names alive, so an entry is
// never stale. Looking one up costs one probe, where finding the device
// and hashing it and the share's ID text cost a probe and two hashes, for
// every allocation of the cluster in every cycle. Cycles may read at once
// (draFleet reads the last cycle's views from any goroutine), so mu guards
// it. A cycle that leaves it holding more than twice its allocations (and
// shareMemoSlack) drops it and the next starts it anew: while a cycle
// reads, it holds at most three times that cycle's allocations and the
// slack.
type shareMemo struct {
	mu   sync.Mutex
	byID map[structured.SharedDeviceID]shareAt
}

// shareMemoSlack is how many entries of allocations that are gone a
// shareMemo keeps beyond twice the allocations of a cycle.
const shareMemoSlack = 1024

// shareAt is a shared allocation's device in the listing (found: the
// listing has it) and its hash.
type shareAt struct {
	at    deviceAt
	found bool
	hash  uint64
}

// takenOn is DRA's allocated state on each of the devices of the driver
// on the node the listing numbers i, in the node's device order.
func (c *Cycle) takenOn(node string, i int) []deviceTaken {
	shared := c.shared[c.pub.offsets[i]:c.pub.offsets[i+1]]
	devices := c.devices[node]
	out := make([]deviceTaken, len(devices))
	for j, dev := range devices {
		out[j] = deviceTaken{exclusive: c.allocated.AllocatedDevices.Has(dev.key), shared: shared[j]}
		out[j].memoryMiB = memoryTaken(c.allocated.AggregatedCapacity[dev.key])
	}
	return out
}

// memoryTaken is the memory a device's allocations consume together, in
// MiB rounded up; 0 when they consume none.
func memoryTaken(capacity map[resourceapi.QualifiedName]*resource.Quantity) int64 {
	if q := capacity["memory"]; q != nil && q.Sign() > 0 {
		return gpu.CeilMiB(*q)
	}
	return 0
}

// allocatedOn is DRA's allocated state on a node's devices of the driver
// as the engine counts it (gpu.NodeGPUs.WithDRA): devices allocated whole,
// and shared devices with the memory their allocations consume together.
func (c *Cycle) allocatedOn(node string, taken []deviceTaken) *gpu.DRAAllocated {
	out := &gpu.DRAAllocated{Exclusive: map[gpu.DRADeviceID]bool{}, SharedMemoryMiB: map[gpu.DRADeviceID]int64{}}
	for i, dev := range c.devices[node] {
		if taken[i].exclusive {
			out.Exclusive[dev.id] = true
		}
		if taken[i].shared || taken[i].memoryMiB > 0 {
			out.SharedMemoryMiB[dev.id] = taken[i].memoryMiB
		}
	}
	return out
}

// draView is a node's GPUs with DRA's allocations counted, and what it was
// computed from: the node's inventory, the signature of the allocations on
// its devices (readAllocations) and what the state said of each device,
// read by the cycle numbered seq. confirmed: a later cycle read the same
// of every device.
type draView struct {
	inv       *gpu.DRAInventory
	signature uint64
	taken     []deviceTaken
	seq       uint64
	confirmed bool
	view      *gpu.NodeGPUs
}

// viewOf is the node's GPUs with DRA's allocations counted. The view of
// the last cycle is handed out again while the node's inventory and the
// allocations on its devices are the same, and with it the answers its
// memo holds: most nodes do not change between two cycles, and views are
// never modified.
//
// The signature does not cover the memory shares consume, which is
// costly to read for every device of every node in every cycle, and the
// scheduler's DRA manager counts a claim's memory twice for a moment,
// while DynamicResources' PreBind moves it from in flight to the assume
// cache. So a new view is handed out again only once a later cycle has
// read the same state of each of the node's devices (confirmed); until
// then each cycle reads the node's devices again, and a view read in that
// moment is replaced by the next cycle's, unless that cycle's read falls
// in the same moment (a few microseconds of a PreBind).
func (c *Cycle) viewOf(node string, d *gpu.DRAInventory) *gpu.NodeGPUs {
	i, ok := c.pub.index[node]
	if !ok {
		return gpu.EmptyDRANodeGPUs(node, d) // the listing publishes no device of the driver there
	}
	return c.viewAt(i, node, d)
}

// viewAt is viewOf for the node the listing numbers i, whose inventory is
// d: a caller that visits every node numbers it once.
func (c *Cycle) viewAt(i int, node string, d *gpu.DRAInventory) *gpu.NodeGPUs {
	if view := c.views[i].Load(); view != nil {
		return view
	}
	c.readOnce.Do(c.readAllocations)
	signature := c.signatures[i]
	last := c.pub.lastViews[i].Load()
	if last == nil || last.inv != d || last.signature != signature || c.pub.shared[i] {
		last = nil
	}
	if last != nil && last.confirmed {
		c.views[i].Store(last.view)
		return last.view
	}
	taken := c.takenOn(node, i)
	if last != nil && last.seq != c.seq && slices.Equal(taken, last.taken) {
		c.pub.lastViews[i].Store(&draView{inv: d, signature: signature, taken: last.taken, seq: last.seq, confirmed: true, view: last.view})
		c.views[i].Store(last.view)
		return last.view
	}
	view := gpu.EmptyDRANodeGPUs(node, d).WithDRA(d, c.allocatedOn(node, taken))
	c.pub.lastViews[i].Store(&draView{inv: d, signature: signature, taken: taken, seq: c.seq, view: view})
	c.views[i].Store(view)
	return view
}

// CycleOf is the cycle's view of DRA, or nil.
func CycleOf(state fwk.CycleState) *Cycle {
	data, err := state.Read(draKey)
	if err != nil {
		return nil
	}
	return data.(*Cycle)
}

// NodeOf is the cycle's view of DRA and the node's DRA-published GPUs,
// when the node publishes GPUs of the driver ("DRA-managed"); else nil.
// cycle.viewOf counts DRA's allocations on them.
func NodeOf(state fwk.CycleState, name string) (*Cycle, *gpu.DRAInventory) {
	cycle := CycleOf(state)
	if cycle == nil {
		return nil, nil
	}
	d := cycle.nodes[name]
	if d == nil {
		return nil, nil
	}
	return cycle, d
}

// servesGPUsByDRA is the rule NodeResourcesFit and DynamicResources apply
// (KEP-5004): a node serves nvidia.com/gpu through DRA when a DeviceClass
// maps the resource and the node has none of it allocatable.
func (c *Cycle) servesGPUsByDRA(nodeInfo fwk.NodeInfo) bool {
	return c.gpuMapped && nodeInfo.GetAllocatable().GetScalarResources()[gpu.ResourceGPU] == 0
}

// filterNode decides a demand on a DRA-managed node. gpusched gives none of
// its GPUs by annotation: they belong to DRA, and an annotation would book
// a GPU that DRA also hands out. Whole GPUs requested through
// nvidia.com/gpu on a node that serves it through DRA are deferred to the
// DynamicResources plugin, which allocates them (and NodeResourcesFit
// leaves the count to it); a model list or memory minimum is kept only
// when every GPU of the node meets it, since DRA picks any. Everything else
// — shares, memory-only requests, or a node whose device plugin also
// serves nvidia.com/gpu — is unschedulable there.
func filterNode(cycle *Cycle, d *gpu.DRAInventory, demand *gpu.Demand, nodeInfo fwk.NodeInfo) *fwk.Status {
	if demand.IsShare() || !cycle.servesGPUsByDRA(nodeInfo) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, gpu.ReasonDRAManaged.String())
	}
	if rs := gpu.DRADeferReasons(d.Inventory, demand); rs != 0 {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, rs.Strings()...)
	}
	return nil
}

// scoreDRA scores a deferred demand on a DRA-managed node when the
// structured allocator cannot predict it (preScoreDeferred): the policy's
// score of the GPUs a first-fit allocator takes, the lowest free devices in
// the allocator's order. 0 when none are free: the DynamicResources
// plugin's Filter rejects the node then. The request excludes no GPU: DRA
// does not know the telemetry's view.
func (p *Placer) scoreDRA(demand *gpu.Demand, view *gpu.NodeGPUs, host gpu.Host) int64 {
	chosen, fit := gpu.PredictFirstFit(view, demand)
	if !fit.OK() {
		return 0
	}
	return p.policy.Score(view, &gpu.Request{Demand: demand, Host: host}, chosen)
}

// reportPublishedTwice records a Warning event on a node whose GPUs are
// published both by a device plugin (allocatable nvidia.com/gpu) and by the
// DRA driver: gpusched leaves them to DRA, so pods that ask gpusched for
// shares or memory by annotation do not go there, and the device plugin
// and the driver can each hand out the same GPU. Each version of the node
// is reported once.
func (p *Placer) reportPublishedTwice(node *v1.Node) {
	if last, ok := p.twiceReported.Load(node.Name); ok && last == node.ResourceVersion {
		return
	}
	p.twiceReported.Store(node.Name, node.ResourceVersion)
	if recorder := p.handle.EventRecorder(); recorder != nil {
		recorder.Eventf(node, nil, v1.EventTypeWarning, "GPUsPublishedTwice", "Scheduling",
			"this node has allocatable %s from a device plugin and publishes GPUs of DRA driver %s: gpusched leaves them to DRA and places no %s pods here; run one of the two (docs/dra.md)",
			gpu.ResourceGPU, p.reader.src.Driver, gpu.AnnotationAssigned)
	}
}

// MaxGPUs is the most GPUs any node of the cycle publishes.
func (c *Cycle) MaxGPUs() int {
	out := 0
	for _, d := range c.nodes {
		out = max(out, d.Inventory.Len())
	}
	return out
}

// logger is the context's logger with the owner plugin's name.
func (r *Reader) logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("plugin", r.owner)
}
