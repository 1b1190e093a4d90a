package gpu

// DRAAllocated is what a DRA allocator has given out, device by device:
// the scheduler's allocated state (allocated claims and claims in flight),
// restricted to the devices of one driver.
type DRAAllocated struct {
	// Exclusive are the devices allocated whole, each to one claim.
	Exclusive map[DRADeviceID]bool
	// SharedMemoryMiB are the devices allocated to several claims at once
	// (consumable capacity, KEP-5075), with the memory the claims consume
	// together; 0 when they consume none.
	SharedMemoryMiB map[DRADeviceID]int64
}

// IsEmpty reports whether nothing is allocated.
func (a *DRAAllocated) IsEmpty() bool {
	return a == nil || len(a.Exclusive) == 0 && len(a.SharedMemoryMiB) == 0
}

// EmptyDRANodeGPUs is a node's DRA-published GPUs with nothing allocated
// on them: the start of a what-if (see WithDRA).
func EmptyDRANodeGPUs(node string, d *DRAInventory) *NodeGPUs {
	return newNodeGPUs(node, d.Inventory, nil)
}

// WithDRA is a new view of n with the DRA allocations on its devices
// counted as well; n is unchanged, and must be a view of d.Inventory (else
// it is returned as it is). A device allocated whole takes its GPU (1000
// milli-GPU). A shared device takes the memory its claims consume, and the
// same part of its compute, rounded up: 20480 MiB of 81920 take 250
// milli-GPU; shares that consume no memory take 1 milli-GPU, so the GPU is
// not idle. A partition (MIG device) takes its memory's part of its parent,
// or the whole parent when either memory is unknown. Usage beyond a GPU's
// capacity is kept, as the ledger keeps conflicting bound pods.
func (n *NodeGPUs) WithDRA(d *DRAInventory, alloc *DRAAllocated) *NodeGPUs {
	if alloc.IsEmpty() || n.Inventory == nil || n.Inventory != d.Inventory {
		return n
	}
	var out *NodeGPUs
	take := func(i int, milli, memoryMiB int64) {
		if out == nil {
			out = n.clone()
		}
		out.addUsage(i, milli, memoryMiB)
	}
	for i, id := range d.IDs {
		if alloc.Exclusive[id] {
			take(i, MilliPerGPU, 0)
		}
		if mem, ok := alloc.SharedMemoryMiB[id]; ok {
			milli := int64(1)
			if mem > 0 {
				milli = partOf(mem, n.Inventory.Devices[i].MemoryMiB)
			}
			take(i, milli, mem)
		}
	}
	for id, p := range d.partitions {
		if alloc.Exclusive[id] {
			take(p.parent, partOf(p.memoryMiB, n.Inventory.Devices[p.parent].MemoryMiB), p.memoryMiB)
		}
	}
	if out == nil {
		return n
	}
	out.summarize()
	return out
}

// partOf is memoryMiB's part of total in milli-GPU, rounded up; a whole GPU
// when either is unknown.
func partOf(memoryMiB, total int64) int64 {
	if memoryMiB <= 0 || total <= 0 {
		return MilliPerGPU
	}
	return min(MilliPerGPU, (memoryMiB*MilliPerGPU+total-1)/total)
}

// addUsage counts milli-GPU and memory on device i of n, which is being built.
func (n *NodeGPUs) addUsage(i int, milli, memoryMiB int64) {
	before := min(MilliPerGPU, max(0, n.Used[i].Milli))
	n.Used[i].Milli += milli
	n.Used[i].MemoryMiB += memoryMiB
	n.usedMilli += min(MilliPerGPU, max(0, n.Used[i].Milli)) - before
}

// PredictFirstFit is the GPUs a DRA allocator gives a demand on n when it
// takes devices first fit, as the structured allocator does for a request
// without constraints: the lowest positions that can take it (a
// DRAInventory's positions follow the allocator's device order). The fit
// says why the demand does not fit; chosen is 0 then.
func PredictFirstFit(n *NodeGPUs, d *Demand) (chosen DeviceSet, fit Fit) {
	fit = Check(n, &Request{Demand: d})
	if !fit.OK() || d.IsZero() {
		return 0, fit
	}
	return lowest(fit.Free, d.Count), fit
}

// PredictFirstFitIn is PredictFirstFit among the positions in class only:
// the GPUs a DRA request of one device class may take. ok is false when
// fewer than d.Count of them can take the demand.
func PredictFirstFitIn(n *NodeGPUs, d *Demand, class DeviceSet) (chosen DeviceSet, ok bool) {
	fit := Check(n, &Request{Demand: d})
	free := fit.Free & class
	if d.IsZero() || free.Len() < d.Count {
		return 0, false
	}
	return lowest(free, d.Count), true
}

// DRADeferReasons says why whole GPUs on a node whose GPUs DRA allocates
// cannot be left to DRA's choice for demand d: DRA takes any device of its
// class, so a model list or a memory minimum holds only when every GPU of
// the node meets it. 0 when the demand may be deferred.
func DRADeferReasons(inv *Inventory, d *Demand) Reasons {
	var rs Reasons
	for i := range inv.Devices {
		if !d.AllowsModel(inv.Devices[i].Model) {
			rs |= Reasons(ReasonModelNotAllowed)
		}
		if inv.Devices[i].MemoryMiB < d.MemoryMiB {
			rs |= Reasons(ReasonMemoryTooSmall)
		}
	}
	return rs
}

// DemandOf is a DRA request of count devices as the engine places it on
// the node of d, among the eligible GPUs, with base's CPU and memory: a
// share of one GPU when the request consumes memoryMiB of the device's
// memory capacity and that is less than the smallest eligible GPU has (its
// part of that GPU, as PlacementOf counts an allocation), else count whole
// GPUs. ok is false when a share's GPUs have no known memory.
func (d *DRAInventory) DemandOf(count int, memoryMiB int64, eligible DeviceSet, base Demand) (demand Demand, ok bool) {
	demand = Demand{Count: count, Milli: MilliPerGPU, MilliCPU: base.MilliCPU, HostMemoryMiB: base.HostMemoryMiB}
	if memoryMiB == 0 || count != 1 {
		return demand, true
	}
	smallest := int64(0)
	for pos := range d.Inventory.Devices {
		if m := d.Inventory.Devices[pos].MemoryMiB; eligible.Has(pos) && m > 0 && (smallest == 0 || m < smallest) {
			smallest = m
		}
	}
	if smallest <= 0 {
		return Demand{}, false
	}
	if memoryMiB < smallest {
		demand.Milli, demand.MemoryMiB = partOf(memoryMiB, smallest), memoryMiB
	}
	return demand, true
}

// DRAPicked is one device a DRA allocation result names, with the memory
// the allocation consumes of it when it is shared (consumable capacity).
type DRAPicked struct {
	ID DRADeviceID
	// Shared: the result is one of several allocations of the device.
	Shared bool
	// MemoryMiB is the memory a shared allocation consumes; 0 when unknown.
	MemoryMiB int64
}

// PlacementOf is a DRA allocation on the node of d as the engine places
// demands, so that a policy can score it: whole GPUs (each picked device
// taken whole), or a share of one GPU (a shared device or a partition,
// with its memory). Devices that are not in d are left out. ok is false
// when nothing of d is picked, or the pick is not a shape the engine
// places (several shares, or shares and whole GPUs together).
func (d *DRAInventory) PlacementOf(picked []DRAPicked) (demand Demand, chosen DeviceSet, ok bool) {
	var shares []Demand
	var shareAt []int
	for _, p := range picked {
		pos, partition, found := d.Position(p.ID)
		switch {
		case !found:
			continue
		case partition:
			memory := d.partitions[p.ID].memoryMiB
			shares = append(shares, Demand{Count: 1, Milli: partOf(memory, d.Inventory.Devices[pos].MemoryMiB), MemoryMiB: memory})
			shareAt = append(shareAt, pos)
		case p.Shared:
			milli := int64(1)
			if p.MemoryMiB > 0 {
				milli = partOf(p.MemoryMiB, d.Inventory.Devices[pos].MemoryMiB)
			}
			if milli >= MilliPerGPU { // a share of all its memory is the GPU
				chosen |= 1 << uint(pos)
				continue
			}
			shares = append(shares, Demand{Count: 1, Milli: milli, MemoryMiB: p.MemoryMiB})
			shareAt = append(shareAt, pos)
		default:
			chosen |= 1 << uint(pos)
		}
	}
	switch {
	case len(shares) == 0 && chosen != 0:
		return Demand{Count: chosen.Len(), Milli: MilliPerGPU}, chosen, true
	case len(shares) == 1 && chosen == 0:
		if shares[0].Milli >= MilliPerGPU { // a partition or share as large as its GPU
			return Demand{Count: 1, Milli: MilliPerGPU}, 1 << uint(shareAt[0]), true
		}
		return shares[0], 1 << uint(shareAt[0]), true
	}
	return Demand{}, 0, false
}
