package dra

import (
	"context"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpudra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/nodehost"
)

// draChoice is the policy's choice of devices for the pod on each node that
// publishes GPUs of the driver and takes the ask: the demand as the engine
// places it there and the GPUs chosen. Immutable.
type draChoice struct {
	nodes map[string]nodeChoice
}

type nodeChoice struct {
	demand gpu.Demand
	chosen gpu.DeviceSet
	// memoized is set when chosen came from the view's memo
	// (gpu.Policy.PlaceAndScore), which holds its score too: Score asks
	// the memo again rather than scoring chosen afresh.
	memoized bool
}

// Clone implements fwk.StateData.
func (c *draChoice) Clone() fwk.StateData { return c }

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
// choice of their devices when it reads them (gpu.AskOfClaims). filter is false when
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

// chooseDRADevices places the ask on every node that publishes GPUs of the
// driver, with the policy and the request Score uses (the node's host, the
// cluster's maxima), among the GPUs the ask's class and selectors select;
// and leaves the choice for Score and the device order for
// GPUDynamicResources (gpudra.WriteOrder), so that DRA allocates what the
// policy chose. Nodes where the policy finds no fit get no order: DRA
// decides there alone, first fit. base is the pod's demand without GPUs
// (its CPU and memory); only, when set, limits the nodes chosen on.
func (p *Placer) chooseDRADevices(ctx context.Context, state fwk.CycleState, cycle *Cycle, nodes []fwk.NodeInfo, ask *gpu.ClaimAsk, base gpu.Demand, only func(fwk.NodeInfo) bool) {
	var maxima gpu.Maxima // those Score's request has (the plugin's PreScore)
	if p.policy.Info().HostAware {
		maxima = p.clusterMaxima(nodes, cycle)
	}
	type result struct {
		node   string // "" where the policy chose nothing
		choice nodeChoice
		order  []gpudra.DeviceName
	}
	results := make([]result, len(nodes))
	selector := p.reader.selectorOf(ask)
	selections := p.reader.selectionsOf(cycle, selector)
	models, _ := p.reader.modelsOf(ctx, cycle, selector)
	p.handle.Parallelizer().Until(ctx, len(nodes), func(i int) {
		nodeInfo := nodes[i]
		name := nodeInfo.Node().Name
		at, ok := cycle.pub.index[name] // one look-up per node: every array below is by it
		if !ok || (only != nil && !only(nodeInfo)) {
			return
		}
		d := cycle.pub.invs[at]
		sel := selections.atIndex(ctx, p.reader, cycle, at, name, d)
		if !sel.ok || sel.partitions || sel.gpus == 0 {
			return // the allocator decides alone: first fit
		}
		eligible := sel.gpus
		demand, ok := d.DemandOf(ask.Count, ask.MemoryMiB, eligible, base)
		if !ok {
			return
		}
		demand.Models = models
		if demand.IsShare() {
			eligible &= sel.shareable // a share needs a device that allows several allocations
		}
		view := cycle.viewAt(at, name, d)
		req := gpu.Request{Demand: &demand, Host: nodehost.Of(maxima, nodeInfo), Exclude: excludeOutside(eligible, d.Inventory)}
		c := nodeChoice{demand: demand}
		var fit gpu.Fit
		if req.Exclude == nil && p.policy.Info().NeedsShapes {
			// The view's memo answers, with the score, while the node keeps
			// its view: most nodes do not change between two cycles.
			c.chosen, fit, _ = p.policy.PlaceAndScore(view, &req)
			c.memoized = true
		} else {
			c.chosen, fit = p.policy.Place(view, &req)
		}
		if !fit.OK() {
			return
		}
		results[i] = result{node: name, choice: c, order: cycle.devicesAt(at, name, c.chosen)}
	}, p.reader.owner)
	choice := &draChoice{nodes: make(map[string]nodeChoice, len(cycle.nodes))}
	order := make(gpudra.Order, len(cycle.nodes))
	for _, r := range results {
		if r.node != "" {
			choice.nodes[r.node] = r.choice
			order[r.node] = r.order
		}
	}
	state.Write(draChoiceKey, choice)
	gpudra.WriteOrder(state, order)
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
