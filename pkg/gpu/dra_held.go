package gpu

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// DRAHeldNode is the node on which a ResourceClaim's allocation holds
// devices of the driver, or "": the node its node selector names by
// metadata.name alone, as the structured allocator writes it for
// node-local devices, when the allocation takes a device of the driver
// (admin access, for monitoring, takes none). Such a node's GPUs belong to
// DRA while the claim is allocated, even while the driver's slices are gone
// (a driver upgrade deletes and re-creates them).
func DRAHeldNode(alloc *resourceapi.AllocationResult, driver string) string {
	if alloc == nil || !takesDriver(alloc, driver) {
		return ""
	}
	return nodeNamed(alloc.NodeSelector)
}

// nodeNamed is the node a node selector names by metadata.name alone, or "".
func nodeNamed(sel *v1.NodeSelector) string {
	if sel == nil || len(sel.NodeSelectorTerms) != 1 {
		return ""
	}
	term := sel.NodeSelectorTerms[0]
	if len(term.MatchExpressions) > 0 || len(term.MatchFields) != 1 {
		return ""
	}
	f := term.MatchFields[0]
	if f.Key != "metadata.name" || f.Operator != v1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}

// takesDriver reports whether an allocation takes a device of the driver.
func takesDriver(alloc *resourceapi.AllocationResult, driver string) bool {
	for _, r := range alloc.Devices.Results {
		if r.Driver == driver && (r.AdminAccess == nil || !*r.AdminAccess) {
			return true
		}
	}
	return false
}
