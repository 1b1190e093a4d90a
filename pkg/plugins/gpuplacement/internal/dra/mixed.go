package dra

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The two ways of handing out a node's GPUs — gpusched's annotation and a
// DRA driver's claims — must never both hold GPUs of one node, since
// neither sees the other's. Nodes that publish GPUs of the driver refuse
// annotation placement (filterNode); the rules here close the gaps around
// that one:
//
//   - A node whose slices are gone while claims allocated there still hold
//     its GPUs (a driver upgrade deletes and re-creates its slices) stays
//     DRA-managed: heldByDRA.
//   - A pod with claims for the driver's GPUs is refused on a node that
//     publishes them while a live pod there holds GPUs by annotation (one
//     placed before the driver published, or by another gpusched replica
//     with DRA disabled): FilterClaims.

// heldByDRA is the nodes that allocated claims hold devices of the driver
// on (gpu.DRAHeldNode): claims allocated as the tracker lists them
// (written, or assumed after the scheduler's own write), and claims whose
// allocation is in flight (between DynamicResources' Reserve and the write
// in PreBind), which the tracker keeps apart from the claim.
func (r *Reader) heldByDRA() (sets.Set[string], error) {
	tracker := r.manager.ResourceClaims()
	claims, err := tracker.List()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	held := sets.New[string]()
	for _, c := range claims {
		alloc := c.Status.Allocation
		if alloc == nil {
			alloc = tracker.GetPendingAllocation(c.UID)
		}
		if node := gpu.DRAHeldNode(alloc, r.src.Driver); node != "" {
			held.Insert(node)
		}
	}
	return held, nil
}

// FilterHeld refuses a GPU demand by annotation on a node whose slices do
// not publish GPUs of the driver now but whose GPUs claims hold.
func FilterHeld(cycle *Cycle, node string) *fwk.Status {
	if cycle != nil && cycle.held.Has(node) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, gpu.ReasonDRAManaged.String())
	}
	return nil
}

type claimClasses []string

// Clone implements fwk.StateData.
func (c claimClasses) Clone() fwk.StateData { return c }

// classesOf is the DeviceClasses the claims' requests and subrequests name,
// but for requests of admin access (which take no device).
func classesOf(claims []*resourceapi.ResourceClaim) claimClasses {
	var out claimClasses
	add := func(class string) {
		if class != "" && !sets.New(out...).Has(class) {
			out = append(out, class)
		}
	}
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil && !ptr.Deref(r.Exactly.AdminAccess, false) {
				add(r.Exactly.DeviceClassName)
			}
			for _, sub := range r.FirstAvailable {
				add(sub.DeviceClassName)
			}
		}
	}
	return out
}

// holdsByAnnotation reports whether a pod on the node holds GPUs by
// gpusched's annotation: any pod the scheduler still has there (it drops
// terminated pods), whatever its deletion state, since it runs until it
// stops.
func holdsByAnnotation(nodeInfo fwk.NodeInfo) bool {
	for _, pi := range nodeInfo.GetPods() {
		pod := pi.GetPod()
		if pod.Annotations[gpu.AnnotationAssigned] != "" && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			return true
		}
	}
	return false
}

// FilterClaims refuses a claim pod on a node that publishes GPUs of the
// driver while a live pod there holds GPUs by annotation, when one of the
// pod's classes selects GPUs or partitions of the node (or cannot be read):
// DRA would hand out GPUs the annotation holds. The pod is schedulable there
// again once those pods are gone. The status is Unschedulable: preemption
// may evict lower-priority holders for it, as for any pod they block.
func (p *Placer) FilterClaims(ctx context.Context, state fwk.CycleState, nodeInfo fwk.NodeInfo) *fwk.Status {
	data, err := state.Read(claimClassesKey)
	if err != nil {
		return nil
	}
	cycle, d := NodeOf(state, nodeInfo.Node().Name)
	if d == nil || !holdsByAnnotation(nodeInfo) {
		return nil
	}
	for _, class := range data.(claimClasses) {
		if sel := p.reader.selected(ctx, cycle, nodeInfo.Node().Name, d, p.reader.selectorOf(&gpu.ClaimAsk{Class: class})); !sel.ok || sel.gpus != 0 || sel.partitions {
			return fwk.NewStatus(fwk.Unschedulable, ReasonAnnotationHolders)
		}
	}
	return nil
}

// ReasonAnnotationHolders is why a claim pod, or whole GPUs deferred to
// DRA, wait for a node that publishes GPUs of the driver while pods there
// hold GPUs by gpusched's annotation (FilterClaims, Placer.Filter).
const ReasonAnnotationHolders = "node GPUs held by gpusched.io/gpu-assigned pods"
