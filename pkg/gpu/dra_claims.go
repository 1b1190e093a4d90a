package gpu

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ClaimAsk is what a pod's GPU claim asks of each node, as the policies
// place it: Count devices of a class, each selected by the class's and the
// request's selectors, consuming MemoryMiB of a device's memory capacity
// when set (a share when it is less than the GPU's memory).
type ClaimAsk struct {
	Class     string
	Count     int
	MemoryMiB int64
	Selectors []resourceapi.DeviceSelector
}

// AskOfClaims is a pod's claims to allocate as a ClaimAsk, or nil when the
// policies do not read them: more than one claim, several requests,
// firstAvailable, allocation mode All, admin access, derived attributes,
// tolerations, constraints (matchAttribute: the engine's choice could
// break one), or a capacity other than memory (in the driver's domain or
// none).
func AskOfClaims(claims []*resourceapi.ResourceClaim, driver string) *ClaimAsk {
	if len(claims) != 1 {
		return nil
	}
	spec := claims[0].Spec.Devices
	if len(spec.Requests) != 1 || len(spec.Constraints) > 0 {
		return nil
	}
	r := spec.Requests[0].Exactly
	if r == nil || r.AllocationMode != resourceapi.DeviceAllocationModeExactCount || r.Count < 1 || r.Count > MaxDevicesPerNode ||
		(r.AdminAccess != nil && *r.AdminAccess) || len(r.DerivedAttributes) > 0 || len(r.Tolerations) > 0 {
		return nil
	}
	ask := &ClaimAsk{Class: r.DeviceClassName, Count: int(r.Count), Selectors: r.Selectors}
	if r.Capacity != nil {
		for name, q := range r.Capacity.Requests {
			if name != DRACapacityMemory && string(name) != driver+"/"+string(DRACapacityMemory) {
				return nil
			}
			ask.MemoryMiB = CeilMiB(q)
		}
	}
	return ask
}

// Demand is the ask as a demand that holds on any node: Count whole GPUs,
// or one GPU's share by memory (Milli 1, MemoryMiB) when one device's
// memory is asked for. Models are left to the caller, who reads the
// selectors.
func (a *ClaimAsk) Demand() Demand {
	if a.MemoryMiB > 0 && a.Count == 1 {
		return Demand{Count: 1, Milli: 1, MemoryMiB: a.MemoryMiB}
	}
	return Demand{Count: a.Count, Milli: MilliPerGPU}
}

// ClaimNames is the names of the ResourceClaims a pod's entries name: the
// claim an entry names itself, or the one the resourceclaim controller made
// from its template, as the pod's status records it (an entry whose status
// names no claim needs none). made is false while a template's claim is not
// recorded yet.
func ClaimNames(pod *v1.Pod) (names []string, made bool) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		status := -1
		for i, s := range pod.Status.ResourceClaimStatuses {
			if s.Name == pc.Name {
				status = i
			}
		}
		switch {
		case status < 0:
			return nil, false
		case pod.Status.ResourceClaimStatuses[status].ResourceClaimName != nil:
			names = append(names, *pod.Status.ResourceClaimStatuses[status].ResourceClaimName)
		}
	}
	return names, true
}

// DRAAllocatedBy is what allocated claims give out of one driver's
// devices, as the scheduler's allocated state counts the claims' written
// allocations: devices allocated without a share ID are taken whole;
// shared devices (consumable capacity) take the memory their allocations
// consume together, in MiB rounded up. Devices allocated for admin access
// take nothing. Unlike the scheduler's state, it does not see allocations
// in flight (reserved, not yet written), and it counts shares as shares
// whether or not the scheduler's DRAConsumableCapacity gate is on.
func DRAAllocatedBy(claims []*resourceapi.ResourceClaim, driver string) *DRAAllocated {
	out := &DRAAllocated{Exclusive: map[DRADeviceID]bool{}, SharedMemoryMiB: map[DRADeviceID]int64{}}
	memory := map[DRADeviceID]*resource.Quantity{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != driver || (r.AdminAccess != nil && *r.AdminAccess) {
				continue
			}
			id := DRADeviceID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
			if r.ShareID == nil {
				out.Exclusive[id] = true
				continue
			}
			q := memory[id]
			if q == nil {
				q = resource.NewQuantity(0, resource.BinarySI)
				memory[id] = q
			}
			if m, ok := r.ConsumedCapacity[DRACapacityMemory]; ok {
				q.Add(m)
			}
		}
	}
	for id, q := range memory {
		out.SharedMemoryMiB[id] = CeilMiB(*q)
	}
	return out
}

// ceilMiB is a quantity of bytes in MiB, rounded up.
func CeilMiB(q resource.Quantity) int64 { return (q.Value() + 1<<20 - 1) >> 20 }

// DRAUse is a claim's use of one GPU of a node: the GPU's position in the
// node's inventory, the part of it taken, and the memory a share consumes
// (0 for a device taken whole).
type DRAUse struct {
	Pos       int
	Milli     int64
	MemoryMiB int64
}

// ClaimUses is what an allocated claim takes of the GPUs of d, as WithDRA
// counts allocations: a device without a share ID takes its GPU whole, a
// partition its memory's part of its parent, a share the part of the GPU
// its consumed memory is (1 milli-GPU when it consumes none). Results of
// other drivers, for admin access, or on devices d does not have take
// nothing.
func ClaimUses(d *DRAInventory, claim *resourceapi.ResourceClaim, driver string) []DRAUse {
	if claim.Status.Allocation == nil || d == nil || d.Inventory == nil {
		return nil
	}
	var out []DRAUse
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver || (r.AdminAccess != nil && *r.AdminAccess) {
			continue
		}
		id := DRADeviceID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		pos, partition, ok := d.Position(id)
		if !ok {
			continue
		}
		total := d.Inventory.Devices[pos].MemoryMiB
		switch {
		case r.ShareID != nil:
			use := DRAUse{Pos: pos, Milli: 1}
			if m, ok := r.ConsumedCapacity[DRACapacityMemory]; ok && m.Sign() > 0 {
				use.MemoryMiB = CeilMiB(m)
				use.Milli = partOf(use.MemoryMiB, total)
			}
			out = append(out, use)
		case partition:
			mem := d.partitions[id].memoryMiB
			out = append(out, DRAUse{Pos: pos, Milli: partOf(mem, total), MemoryMiB: mem})
		default:
			out = append(out, DRAUse{Pos: pos, Milli: MilliPerGPU})
		}
	}
	return out
}
