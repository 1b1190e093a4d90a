package gpu

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Reason is one cause for a demand not fitting a node. Its text (String) is
// stable: events count nodes per reason, and users and tools match on it.
type Reason uint16

const (
	// ReasonInventoryInvalid: the node's GPU labels or annotation are malformed.
	ReasonInventoryInvalid Reason = 1 << iota
	// ReasonNoGPUs: the node has no GPUs at all.
	ReasonNoGPUs
	// ReasonModelNotAllowed: GPUs were ruled out by the pod's model list.
	ReasonModelNotAllowed
	// ReasonMemoryTooSmall: GPUs were ruled out because their memory is below
	// the pod's per-GPU memory request.
	ReasonMemoryTooSmall
	// ReasonTooFewGPUs: the node has fewer GPUs than the pod asks for, even
	// when all are free.
	ReasonTooFewGPUs
	// ReasonInsufficientGPUs: too few of the node's suitable GPUs are free.
	ReasonInsufficientGPUs
	// ReasonInsufficientShare: no suitable GPU has the free milli-GPU a share needs.
	ReasonInsufficientShare
	// ReasonInsufficientMemory: suitable GPUs have the free milli-GPU a share
	// needs, but not the free memory.
	ReasonInsufficientMemory
	// ReasonUnhealthy: GPUs were ruled out because the node marks them
	// unhealthy (Device.Unhealthy).
	ReasonUnhealthy
	// ReasonDRAManaged: the node's GPUs are allocated by DRA (it publishes
	// them in ResourceSlices), so gpusched gives none of them by annotation.
	ReasonDRAManaged

	reasonEnd
)

// unresolvable are the reasons that freeing GPUs on the node cannot cure.
const unresolvable = ReasonInventoryInvalid | ReasonNoGPUs | ReasonModelNotAllowed | ReasonMemoryTooSmall | ReasonTooFewGPUs | ReasonUnhealthy | ReasonDRAManaged

var reasonText = map[Reason]string{
	ReasonInventoryInvalid:   "node GPU inventory invalid",
	ReasonNoGPUs:             "node has no GPUs",
	ReasonModelNotAllowed:    "GPU model not allowed",
	ReasonMemoryTooSmall:     "GPU memory below request",
	ReasonTooFewGPUs:         "too few GPUs on node",
	ReasonInsufficientGPUs:   "insufficient free GPUs",
	ReasonInsufficientShare:  "insufficient free GPU share",
	ReasonInsufficientMemory: "insufficient free GPU memory",
	ReasonUnhealthy:          "GPU unhealthy",
	ReasonDRAManaged:         "node GPUs allocated by DRA",
}

// String is the reason's stable text.
func (r Reason) String() string { return reasonText[r] }

// Reasons is a set of Reason.
type Reasons uint16

// Has reports whether r is in the set.
func (rs Reasons) Has(r Reason) bool { return rs&Reasons(r) != 0 }

// Unresolvable reports whether freeing GPUs on the node cannot make the demand
// fit (preemption would not help).
func (rs Reasons) Unresolvable() bool { return rs&Reasons(unresolvable) != 0 }

// Strings lists the reasons' texts in a fixed order.
func (rs Reasons) Strings() []string {
	var out []string
	for r := Reason(1); r < reasonEnd; r <<= 1 {
		if rs.Has(r) {
			out = append(out, r.String())
		}
	}
	return out
}

func (rs Reasons) String() string { return strings.Join(rs.Strings(), ", ") }

// candidates returns the node's GPUs that can take the demand now. When fewer
// than d.Count qualify it also returns why, one Reason per cause: first the
// causes no amount of freeing could cure (model, memory size, health, GPU
// count), and only when there are none, what is short right now.
//
// It does not allocate; d must not be zero.
func candidates(n *NodeGPUs, d *Demand) (DeviceSet, Reasons) {
	if n.Err != nil {
		return 0, Reasons(ReasonInventoryInvalid)
	}
	if n.Len() == 0 {
		return 0, Reasons(ReasonNoGPUs)
	}
	if len(d.Models) == 0 && d.MemoryMiB == 0 && n.unhealthy == 0 { // every GPU is suitable: answer from the summaries
		switch {
		case !d.IsShare() && n.Len() < d.Count:
			return n.idle, Reasons(ReasonTooFewGPUs)
		case !d.IsShare() && n.idle.Len() < d.Count:
			return n.idle, Reasons(ReasonInsufficientGPUs)
		case !d.IsShare():
			return n.idle, 0
		case n.maxFreeMilli < d.Milli:
			return 0, Reasons(ReasonInsufficientShare)
		}
	}
	var suitable, free DeviceSet
	var static, short Reasons
	for i := range n.Inventory.Devices {
		switch r := DeviceReason(n, d, i); {
		case r == 0:
			suitable |= 1 << uint(i)
			free |= 1 << uint(i)
		case Reasons(r).Unresolvable():
			static |= Reasons(r)
		default:
			suitable |= 1 << uint(i)
			short |= Reasons(r)
		}
	}
	if suitable.Len() < d.Count {
		if static == 0 {
			static = Reasons(ReasonTooFewGPUs)
		}
		return free, static
	}
	if free.Len() < d.Count {
		return free, short
	}
	return free, 0
}

// DeviceReason is why device i of n cannot take the demand now, or 0 when
// it can: the per-GPU cause behind the reasons Check counts. A reason that
// freeing cannot cure (model, memory size, health) comes before one that it
// can. n must have an inventory (n.Err == nil) and i must be one of its
// devices.
func DeviceReason(n *NodeGPUs, d *Demand, i int) Reason {
	dev := &n.Inventory.Devices[i]
	switch {
	case !d.AllowsModel(dev.Model):
		return ReasonModelNotAllowed
	case dev.MemoryMiB < d.MemoryMiB:
		return ReasonMemoryTooSmall
	case n.unhealthy.Has(i):
		return ReasonUnhealthy
	case !d.IsShare():
		if n.Used[i].Milli == 0 {
			return 0
		}
		return ReasonInsufficientGPUs
	case n.FreeMilli(i) < d.Milli:
		return ReasonInsufficientShare
	case n.FreeMemoryMiB(i) < d.MemoryMiB:
		return ReasonInsufficientMemory
	}
	return 0
}

// Fit is what Check finds for a request on a node.
type Fit struct {
	// Free is the GPUs that can take the demand now, excluded GPUs left out.
	Free DeviceSet
	// Reasons say why the demand does not fit the node's free GPUs, one per
	// cause; 0 when it does.
	Reasons Reasons
	// Excluded is set when the demand fits the node's free GPUs but not
	// once the GPUs the request excludes are left out: a short
	// human-readable text naming them, which the front end reports as the
	// cause. Freeing GPUs on the node does not cure it.
	Excluded string
}

// OK reports whether the demand fits.
func (f Fit) OK() bool { return f.Reasons == 0 && f.Excluded == "" }

// Check decides whether the request's demand fits n, without choosing GPUs:
// what a front end's filter asks. A demand without GPUs always fits.
func Check(n *NodeGPUs, req *Request) Fit {
	if req.Demand == nil || req.Demand.IsZero() {
		return Fit{}
	}
	free, reasons := candidates(n, req.Demand)
	if reasons != 0 || req.Exclude == nil {
		return Fit{Free: free, Reasons: reasons}
	}
	return withoutExcluded(n, req, free)
}

// withoutExcluded is the fit of a demand whose free GPUs are free, once
// the GPUs req.Exclude names are left out.
func withoutExcluded(n *NodeGPUs, req *Request, free DeviceSet) Fit {
	excluded, why := excludedOf(req.Exclude, n)
	kept := free &^ excluded
	if excluded != 0 && kept.Len() < req.Demand.Count {
		return Fit{Free: kept, Excluded: why}
	}
	return Fit{Free: kept}
}

// NewAssignment records the GPUs chosen for d on node n.
func NewAssignment(n *NodeGPUs, d *Demand, chosen DeviceSet) Assignment {
	a := Assignment{Node: n.Name, Milli: d.Milli, Devices: make([]int, 0, chosen.Len())}
	if d.IsShare() {
		a.MemoryMiB = d.MemoryMiB
	}
	haveUUIDs := true
	for i := range n.Inventory.Devices {
		if chosen.Has(i) {
			a.Devices = append(a.Devices, n.Inventory.Devices[i].Index)
			haveUUIDs = haveUUIDs && n.Inventory.Devices[i].UUID != ""
		}
	}
	if haveUUIDs {
		for i := range n.Inventory.Devices {
			if chosen.Has(i) {
				a.UUIDs = append(a.UUIDs, n.Inventory.Devices[i].UUID)
			}
		}
	}
	return a
}

// CouldFit reports whether d could fit node were all of its GPUs free: whether
// the node is worth trying again when it appears or changes.
func CouldFit(node *v1.Node, d *Demand) bool {
	inv, err := InventoryFromNode(node)
	_, reasons := candidates(newNodeGPUs(node.Name, inv, err), d)
	return !reasons.Unresolvable()
}
