package dra

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Which of a node's devices a claim may take is its class's and its
// request's CEL selectors, evaluated on each device. The device choice asks
// it of every node that publishes GPUs in every cycle of a claim pod, so
// the answers are kept per selector and listing of the slices
// (selectionSet), and found with one lookup per cycle.

// selectedDevices is which devices of the driver on a node a class and
// selectors select, with what they were computed from: whole GPUs (by
// inventory position), those of them that allow several allocations
// (consumable capacity), and whether any partition (MIG) is selected. ok is
// false when the selection could not be evaluated.
type selectedDevices struct {
	slices     []*resourceapi.ResourceSlice
	class      *resourceapi.DeviceClass
	gpus       gpu.DeviceSet
	shareable  gpu.DeviceSet
	partitions bool
	ok         bool
}

// maxSelections bounds the selections kept: claims with selectors of their
// own (a UUID pin) add one per node.
const maxSelections = 1 << 14

// askSelector is an ask's device class and the CEL expressions of the
// class's and the request's selectors, read once per cycle; key names
// them in the selections kept.
type askSelector struct {
	class *resourceapi.DeviceClass
	exprs []string
	key   string
}

// selectorOf reads the ask's class and selectors; nil when the class
// cannot be read: the allocator then decides alone.
func (r *Reader) selectorOf(ask *gpu.ClaimAsk) *askSelector {
	class, err := r.manager.DeviceClasses().Get(ask.Class)
	if err != nil {
		return nil
	}
	exprs := make([]string, 0, len(class.Spec.Selectors)+len(ask.Selectors))
	for _, sel := range slices.Concat(class.Spec.Selectors, ask.Selectors) {
		if sel.CEL != nil {
			exprs = append(exprs, sel.CEL.Expression)
		}
	}
	return &askSelector{class: class, exprs: exprs, key: ask.Class + "\x00" + strings.Join(exprs, "\x00")}
}

// selectionSet is one askSelector's selections on the nodes of one listing
// of the slices, by the node's index in the listing (publishedGPUs.index),
// each evaluated on first use. A set made for a new listing starts with
// the last listing's selections of the nodes whose slices are the same
// objects, so that a listing that changed on one node evaluates that node
// alone again.
type selectionSet struct {
	sel    *askSelector
	pub    *publishedGPUs
	byNode []atomic.Pointer[selectedDevices]
}

// selectionsOf is the set of sel's selections for the cycle's listing. The
// sets are kept by selector; maxSelections bounds the selections they
// hold together. sel nil (the class cannot be read) gives a set whose
// selections are never ok.
func (r *Reader) selectionsOf(cycle *Cycle, sel *askSelector) *selectionSet {
	if sel == nil {
		return &selectionSet{}
	}
	var last *selectionSet
	if v, ok := r.selections.Load(sel.key); ok {
		last = v.(*selectionSet)
		if last.pub == cycle.pub && last.sel.class == sel.class {
			return last
		}
	}
	set := &selectionSet{sel: sel, pub: cycle.pub, byNode: make([]atomic.Pointer[selectedDevices], len(cycle.pub.index))}
	if last != nil && last.sel.class == sel.class {
		for node, i := range cycle.pub.index {
			if j, ok := last.pub.index[node]; ok {
				if sd := last.byNode[j].Load(); sd != nil && slices.Equal(sd.slices, cycle.pub.onNode[node]) {
					set.byNode[i].Store(sd)
				}
			}
		}
	}
	r.selections.Store(sel.key, set)
	return set
}

// at is the devices of the driver on the node that the set's selector
// selects, evaluated with DRA's CEL library and the scheduler's CEL
// features. It is not ok when a selector does not compile or the class
// could not be read: the allocator then decides alone.
func (s *selectionSet) at(ctx context.Context, r *Reader, cycle *Cycle, node string, d *gpu.DRAInventory) *selectedDevices {
	if s.sel == nil {
		return &selectedDevices{}
	}
	i, indexed := s.pub.index[node]
	if !indexed {
		i = -1
	}
	return s.atIndex(ctx, r, cycle, i, node, d)
}

// atIndex is at for the node the listing numbers i (-1: one it does not
// number), for a caller that visits every node and numbers it once.
func (s *selectionSet) atIndex(ctx context.Context, r *Reader, cycle *Cycle, i int, node string, d *gpu.DRAInventory) *selectedDevices {
	if s.sel == nil {
		return &selectedDevices{}
	}
	indexed := i >= 0
	if indexed {
		if sd := s.byNode[i].Load(); sd != nil {
			return sd
		}
	}
	nodeSlices := cycle.onNode[node]
	sd := r.evaluate(ctx, node, d, nodeSlices, s.sel.exprs)
	if ctx.Err() != nil {
		// Cut short (Filter's context ends once enough nodes fit): a
		// selector may have failed for it, so nothing is kept, and the
		// allocator decides alone.
		return &selectedDevices{}
	}
	sd.slices, sd.class = nodeSlices, s.sel.class
	if !indexed {
		return sd
	}
	if r.selectionCount.Add(1) > maxSelections {
		r.selections.Clear()
		r.selectionCount.Store(0)
	}
	s.byNode[i].Store(sd)
	return sd
}

// selected is the node's selection by sel (selectionSet.at), for a caller
// that asks of one node.
func (r *Reader) selected(ctx context.Context, cycle *Cycle, node string, d *gpu.DRAInventory, sel *askSelector) *selectedDevices {
	return r.selectionsOf(cycle, sel).at(ctx, r, cycle, node, d)
}

// evaluate runs the selectors on each device of the driver on the node.
func (r *Reader) evaluate(ctx context.Context, node string, d *gpu.DRAInventory, nodeSlices []*resourceapi.ResourceSlice, exprs []string) *selectedDevices {
	programs := make([]cel.CompilationResult, len(exprs))
	for i, expr := range exprs {
		if programs[i] = r.celCache.GetOrCompile(expr); programs[i].Error != nil {
			r.logger(ctx).V(4).Info("Not choosing DRA devices: a selector does not compile", "node", node, "expression", expr, "err", programs[i].Error)
			return &selectedDevices{}
		}
	}
	sd := &selectedDevices{ok: true}
	for _, s := range nodeSlices {
		if s.Spec.Driver != r.src.Driver {
			continue
		}
	devices:
		for i := range s.Spec.Devices {
			dev := &s.Spec.Devices[i]
			pos, partition, found := d.Position(gpu.DRADeviceID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: dev.Name})
			if !found {
				continue
			}
			input := cel.Device{Driver: s.Spec.Driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity}
			for _, program := range programs {
				if match, _, err := program.DeviceMatches(ctx, input); err != nil || !match {
					continue devices
				}
			}
			switch {
			case partition:
				sd.partitions = true
			default:
				sd.gpus |= 1 << uint(pos)
				if ptr.Deref(dev.AllowMultipleAllocations, false) {
					sd.shareable |= 1 << uint(pos)
				}
			}
		}
	}
	return sd
}
