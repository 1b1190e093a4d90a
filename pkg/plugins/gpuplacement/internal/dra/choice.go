package dra

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpudra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/nodehost"
)

// draChoice is the policy's choice of devices for the pod on each node
// that publishes GPUs of the driver and takes the ask, made when it is
// first asked for (at): from GPUDynamicResources' Filter of the node, which
// lists the chosen devices first for DRA's allocator, or from Score. Its
// inputs are read in PreFilter but for the node's CPU and memory, which are
// those of the node the first asker hands it (Filter may hand it with pods
// nominated to it, or without preemption's victims); each is made once, or
// twice when two asks for the node race (the first kept).
type draChoice struct {
	p          *Placer
	cycle      *Cycle
	ask        *gpu.ClaimAsk
	base       gpu.Demand
	maxima     gpu.Maxima
	selections *selectionSet
	models     []string
	only       func(fwk.NodeInfo) bool
	nodes      []atomic.Pointer[nodeChoice] // by the node's number in cycle.pub
}

// nodeChoice is the choice on one node: the demand as the engine places
// it there, the GPUs chosen and the devices they name, in preferred order.
type nodeChoice struct {
	demand gpu.Demand
	chosen gpu.DeviceSet
	// memoized is set when chosen came from the view's memo
	// (gpu.Policy.PlaceAndScore), which holds its score too: Score asks
	// the memo again rather than scoring chosen afresh.
	memoized bool
	devices  []gpudra.DeviceName
}

// noChoice marks a node where the policy chooses nothing: DRA decides
// there alone, first fit.
var noChoice = &nodeChoice{}

// Clone implements fwk.StateData.
func (c *draChoice) Clone() fwk.StateData { return c }

// Driver implements gpudra.Preferences.
func (c *draChoice) Driver() string { return c.p.reader.src.Driver }

// Of implements gpudra.Preferences: the devices chosen on the node.
func (c *draChoice) Of(ctx context.Context, node fwk.NodeInfo) []gpudra.DeviceName {
	if nc := c.at(ctx, node); nc != nil {
		return nc.devices
	}
	return nil
}

// at is the choice on the node, made on first use; nil where the policy
// chooses nothing.
func (c *draChoice) at(ctx context.Context, nodeInfo fwk.NodeInfo) *nodeChoice {
	name := nodeInfo.Node().Name
	i, ok := c.cycle.pub.index[name]
	if !ok {
		return nil
	}
	nc := c.nodes[i].Load()
	if nc == nil {
		c.nodes[i].CompareAndSwap(nil, c.choose(ctx, i, name, nodeInfo))
		nc = c.nodes[i].Load()
	}
	if nc == noChoice {
		return nil
	}
	return nc
}

// choose places the ask on the node the cycle's listing numbers i, with
// the policy and the request Score uses (the node's host, the cluster's
// maxima), among the GPUs the ask's class and selectors select; noChoice
// where it does not fit or where the allocator decides alone.
func (c *draChoice) choose(ctx context.Context, i int, name string, nodeInfo fwk.NodeInfo) *nodeChoice {
	p, cycle := c.p, c.cycle
	if c.only != nil && !c.only(nodeInfo) {
		return noChoice
	}
	d := cycle.pub.invs[i]
	sel := c.selections.atIndex(ctx, p.reader, cycle, i, name, d)
	if !sel.ok || sel.partitions || sel.gpus == 0 {
		return noChoice // the allocator decides alone: first fit
	}
	eligible := sel.gpus
	demand, ok := d.DemandOf(c.ask.Count, c.ask.MemoryMiB, eligible, c.base)
	if !ok {
		return noChoice
	}
	demand.Models = c.models
	if demand.IsShare() {
		eligible &= sel.shareable // a share needs a device that allows several allocations
	}
	view := cycle.viewAt(i, name, d)
	req := gpu.Request{Demand: &demand, Host: nodehost.Of(c.maxima, nodeInfo), Exclude: excludeOutside(eligible, d.Inventory)}
	nc := &nodeChoice{demand: demand}
	var fit gpu.Fit
	if req.Exclude == nil && p.policy.Info().NeedsShapes {
		// The view's memo answers, with the score, while the node keeps
		// its view: most nodes do not change between two cycles.
		nc.chosen, fit, _ = p.policy.PlaceAndScore(view, &req)
		nc.memoized = true
	} else {
		nc.chosen, fit = p.policy.Place(view, &req)
	}
	if !fit.OK() {
		return noChoice
	}
	nc.devices = cycle.devicesAt(i, name, nc.chosen)
	return nc
}

// draChoiceOf is the cycle's choice, or nil.
func draChoiceOf(state fwk.CycleState) *draChoice {
	data, err := state.Read(draChoiceKey)
	if err != nil {
		return nil
	}
	return data.(*draChoice)
}

// choosesDRADevices reports whether the profile allocates claims with the
// devices GPUPlacement chooses: GPUDynamicResources comes after it at
// PreFilter (and so reads the order it writes). Otherwise DynamicResources
// allocates first fit, and Score scores that prediction (claims.go).
func (p *Placer) choosesDRADevices() bool {
	p.draOrder.Do(func() {
		lister, ok := p.handle.(interface{ ListPlugins() *schedconfig.Plugins })
		if !ok {
			return
		}
		plugins := lister.ListPlugins()
		if plugins == nil {
			return
		}
		names := make([]string, len(plugins.PreFilter.Enabled))
		for i, pl := range plugins.PreFilter.Enabled {
			names[i] = pl.Name
		}
		self, dra := slices.Index(names, p.reader.owner), slices.Index(names, gpudra.Name)
		p.ordersDRA = self >= 0 && dra > self
		if dra >= 0 && dra < self {
			klog.Background().Info("GPUDynamicResources runs before the placement plugin at PreFilter, so DRA allocates first fit: list it after that plugin (docs/dra.md)", "plugin", p.reader.owner)
		}
	})
	return p.ordersDRA
}

// PreFilterClaims prepares a pod with claims of its own: the classes its
// unallocated claims ask for, for Filter (FilterClaims), and the policy's
// choice of their devices when it reads them (gpu.AskOfClaims), made node
// by node as they are filtered. filter is false when
// the pod has no claim to allocate: Filter has nothing to check.
func (p *Placer) PreFilterClaims(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, base *gpu.Demand) (filter bool) {
	claims, ok := p.claimsToAllocate(ctx, pod)
	if !ok || len(claims) == 0 {
		return false
	}
	classes := classesOf(claims)
	state.Write(claimClassesKey, classes)
	if !p.choosesDRADevices() {
		return len(classes) > 0
	}
	if ask := gpu.AskOfClaims(claims, p.reader.src.Driver); ask != nil {
		p.chooseDRADevices(ctx, state, CycleOf(state), nodes, ask, *base, nil)
	}
	return len(classes) > 0
}

// ChooseForDeferred chooses the devices DRA allocates for whole GPUs asked
// for as nvidia.com/gpu on nodes that serve it through DRA (KEP-5004): the
// claim DynamicResources makes, count devices of the class that maps the
// resource. Filter decides the pod's models and memory minimum on such
// nodes (filterNode).
func (p *Placer) ChooseForDeferred(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, demand *gpu.Demand) {
	if !p.choosesDRADevices() {
		return
	}
	cycle := CycleOf(state)
	resolver := p.reader.manager.DeviceClassResolver()
	if demand.IsShare() || !cycle.gpuMapped || resolver == nil {
		return
	}
	class := resolver.GetDeviceClass(gpu.ResourceGPU)
	if class == nil {
		return
	}
	p.chooseDRADevices(ctx, state, cycle, nodes, &gpu.ClaimAsk{Class: class.Name, Count: demand.Count}, *demand, cycle.servesGPUsByDRA)
}

// chooseDRADevices prepares the policy's choice of devices for the ask
// on every node that publishes GPUs of the driver (draChoice, made node by
// node as the nodes are filtered), for Score, and hands it to
// GPUDynamicResources as the pod's Preferences (gpudra.WritePreferences),
// so that DRA allocates what the policy chose. Nodes where the policy
// finds no fit get no preference: DRA decides there alone, first fit.
// base is the pod's demand without GPUs (its CPU and memory); only, when
// set, limits the nodes chosen on.
func (p *Placer) chooseDRADevices(ctx context.Context, state fwk.CycleState, cycle *Cycle, nodes []fwk.NodeInfo, ask *gpu.ClaimAsk, base gpu.Demand, only func(fwk.NodeInfo) bool) {
	choice := &draChoice{p: p, cycle: cycle, ask: ask, base: base, only: only,
		nodes: make([]atomic.Pointer[nodeChoice], len(cycle.pub.invs))}
	if p.policy.Info().HostAware {
		choice.maxima = p.clusterMaxima(nodes, cycle) // those Score's request has (the plugin's PreScore)
	}
	selector := p.reader.selectorOf(ask)
	choice.selections = p.reader.selectionsOf(cycle, selector)
	choice.models, _ = p.reader.modelsOf(ctx, cycle, selector)
	state.Write(draChoiceKey, choice)
	gpudra.WritePreferences(state, choice)
}

// onlyAmong excludes every GPU outside a set: those the claim cannot take.
type onlyAmong gpu.DeviceSet

// excludeOutside is onlyAmong(eligible) where it leaves some of the node's
// GPUs out, and nil where it leaves none: the engine remembers its answers
// only for a request that excludes nothing (gpu.Policy.PlaceAndScore).
func excludeOutside(eligible gpu.DeviceSet, inv *gpu.Inventory) gpu.Excluder {
	if allGPUs(inv)&^eligible == 0 {
		return nil
	}
	return onlyAmong(eligible)
}

// allGPUs is the set of every GPU of an inventory.
func allGPUs(inv *gpu.Inventory) gpu.DeviceSet { return gpu.DeviceSet(1)<<uint(inv.Len()) - 1 }

// Excluded implements gpu.Excluder.
func (s onlyAmong) Excluded(_ string, inv *gpu.Inventory) (gpu.DeviceSet, string) {
	out := allGPUs(inv) &^ gpu.DeviceSet(s)
	if out == 0 {
		return 0, ""
	}
	return out, "not selected by the claim's device class or selectors"
}

// devicesAt names the driver's devices at the chosen positions of the node
// the listing numbers i, in published order: each chosen GPU and its
// partitions. The names of the node's last choice are handed out again
// for the same choice (Orders are never modified): a node's choice rarely
// changes from one cycle to the next, and GPUDynamicResources compares a
// node's preference with its last one.
func (c *Cycle) devicesAt(i int, node string, chosen gpu.DeviceSet) []gpudra.DeviceName {
	if last := c.pub.chosen[i].Load(); last != nil && last.set == chosen {
		return last.names
	}
	var out []gpudra.DeviceName
	for _, dev := range c.devices[node] {
		if dev.pos >= 0 && chosen.Has(dev.pos) {
			out = append(out, gpudra.DeviceName{Driver: dev.id.Driver, Pool: dev.id.Pool, Device: dev.id.Device})
		}
	}
	c.pub.chosen[i].Store(&chosenDevices{set: chosen, names: out})
	return out
}

// chosenDevices is a node's chosen GPUs and the devices they name.
type chosenDevices struct {
	set   gpu.DeviceSet
	names []gpudra.DeviceName
}

// modelsOf is the GPU models whose devices the ask's class and selectors
// select on the cluster's nodes, as a demand names the models a pod may run
// on: PairFit's model-aware prices (and floors) then see a claim that pins
// models as they see a pod annotated with them. models is nil when every
// GPU of the driver is selected (the claim is not constrained), when none
// is (selectsGPUs is then false: the claim asks for other devices), or
// when a selection cannot be evaluated (selectsGPUs true). It is computed
// once per listing of the slices and selector, from the selections the
// device choice reads anyway.
func (r *Reader) modelsOf(ctx context.Context, cycle *Cycle, sel *askSelector) (models []string, selectsGPUs bool) {
	if sel == nil {
		return nil, true
	}
	if v, ok := r.models.Load(sel.key); ok {
		if m := v.(*askModels); m.pub == cycle.pub && m.class == sel.class {
			return m.models, m.selectsGPUs
		}
	}
	m := &askModels{pub: cycle.pub, class: sel.class}
	admitted := map[string]bool{}
	constrained, ok := false, true
	selections := r.selectionsOf(cycle, sel)
	for node, d := range cycle.nodes {
		sd := selections.at(ctx, r, cycle, node, d)
		if !sd.ok {
			ok = false
			break
		}
		for pos := range d.Inventory.Devices {
			if sd.gpus.Has(pos) {
				admitted[d.Inventory.Devices[pos].Model] = true
			} else {
				constrained = true
			}
		}
	}
	m.selectsGPUs = !ok || len(admitted) > 0
	if ok && constrained && len(admitted) > 0 {
		m.models = slices.Sorted(maps.Keys(admitted))
	}
	if r.modelCount.Add(1) > maxSelections {
		r.models.Clear()
		r.modelCount.Store(0)
	}
	r.models.Store(sel.key, m)
	return m.models, m.selectsGPUs
}

// askModels is an ask's models (modelsOf), with the listing and class
// they were read from.
type askModels struct {
	pub         *publishedGPUs
	class       *resourceapi.DeviceClass
	models      []string
	selectsGPUs bool
}

// claimsToAllocate is the pod's claims that DRA has yet to allocate
// (neither allocated nor pending for another pod), in the pod's order; ok
// is false when a claim cannot be read (it may not exist yet).
func (p *Placer) claimsToAllocate(ctx context.Context, pod *v1.Pod) (claims []*resourceapi.ResourceClaim, ok bool) {
	all, ok := p.reader.claimsOf(ctx, pod)
	if !ok {
		return nil, false
	}
	tracker := p.reader.manager.ResourceClaims()
	for _, claim := range all {
		if claim.Status.Allocation == nil && tracker.GetPendingAllocation(claim.UID) == nil {
			claims = append(claims, claim)
		}
	}
	return claims, true
}
