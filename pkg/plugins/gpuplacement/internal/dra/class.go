package dra

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The common claim — one request for a number of whole GPUs of one class,
// nothing else — is filled by DRA's allocator with the first free devices
// of the class in its device order. Which devices of a node the class
// selects changes only with the node's slices or the class, so it is
// found once (by the allocator itself) and kept; each cycle then predicts
// the allocation from the cycle's view of the node, without running the
// allocator on every node again (docs/benchmarks.md, DRA).

// simpleRequest is a claim the allocator fills first fit from one class:
// a single request of count devices, with no selectors, capacity,
// tolerations, derived attributes or admin access of its own, and no
// constraints.
type simpleRequest struct {
	class string
	count int
}

// simpleRequestOf is the pod's claims as a simpleRequest, or nil when they
// are anything else: what gpu.AskOfClaims refuses, and selectors or capacity.
func simpleRequestOf(claims []*resourceapi.ResourceClaim) *simpleRequest {
	ask := gpu.AskOfClaims(claims, "")
	if ask == nil || len(ask.Selectors) > 0 || claims[0].Spec.Devices.Requests[0].Exactly.Capacity != nil {
		return nil
	}
	return &simpleRequest{class: ask.Class, count: ask.Count}
}

// classDevices is which GPUs of a node a device class selects, found from
// the node's slices and the class it was computed for.
type classDevices struct {
	slices []*resourceapi.ResourceSlice
	class  *resourceapi.DeviceClass
	set    gpu.DeviceSet
	// ok is false when the class's choice on the node cannot be predicted
	// from the set: it selects devices that are not GPUs of the inventory,
	// or GPUs that may be shared (consumable capacity), or the allocator
	// could not select them all.
	ok bool
}

// classDevicesOf is which GPUs of the node class selects (see
// classDevices), from the cache when neither the node's slices nor the
// class changed.
//
// It reads every driver's slices on the node, so that a class that also
// selects another driver's devices is seen to (and not predicted); when
// some slice is not local to one node (nodeSelector, allNodes), no class
// is predicted, since its devices could come first anywhere.
func (r *Reader) classDevicesOf(ctx context.Context, cycle *Cycle, node *v1.Node, d *gpu.DRAInventory, class string) (gpu.DeviceSet, bool) {
	if cycle.nonLocalSlices {
		return 0, false
	}
	nodeSlices := cycle.onNode[node.Name]
	dc, err := r.manager.DeviceClasses().Get(class)
	if err != nil {
		return 0, false
	}
	key := node.Name + "/" + class
	if c, ok := r.classes.Load(key); ok {
		if cd := c.(*classDevices); cd.class == dc && slices.Equal(cd.slices, nodeSlices) {
			return cd.set, cd.ok
		}
	}
	cd := &classDevices{slices: nodeSlices, class: dc}
	cd.set, cd.ok = r.selectAll(ctx, node, d, nodeSlices, class)
	r.classes.Store(key, cd)
	return cd.set, cd.ok
}

// selectAll asks the allocator for every device of class on the node, with
// nothing allocated: the devices the class selects there.
func (r *Reader) selectAll(ctx context.Context, node *v1.Node, d *gpu.DRAInventory, nodeSlices []*resourceapi.ResourceSlice, class string) (gpu.DeviceSet, bool) {
	for _, s := range nodeSlices {
		for i := range s.Spec.Devices {
			if ptr.Deref(s.Spec.Devices[i].AllowMultipleAllocations, false) {
				return 0, false
			}
		}
	}
	empty := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	allocator, err := structured.NewAllocator(ctx, r.features, empty, r.manager.DeviceClasses(), nodeSlices, r.celCache)
	if err != nil {
		return 0, false
	}
	all := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "class-" + class, UID: types.UID("class-" + class)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "all",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeAll},
		}}}},
	}
	results, err := allocator.Allocate(ctx, node, []*resourceapi.ResourceClaim{all})
	if err != nil || len(results) != 1 {
		return 0, false
	}
	var set gpu.DeviceSet
	for _, res := range results[0].Devices.Results {
		pos, partition, found := d.Position(gpu.DRADeviceID{Driver: res.Driver, Pool: res.Pool, Device: res.Device})
		if !found || partition {
			return 0, false
		}
		set |= 1 << uint(pos)
	}
	return set, true
}
