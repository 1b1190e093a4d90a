package gpu

// The resource-weighted policies: BestFit, Spread and Packing.
const (
	// PolicyBestFit prefers the node whose GPUs are most allocated once the pod
	// is placed, and puts a share on the fitting GPU with the least free room.
	PolicyBestFit PolicyType = "BestFit"
	// PolicySpread prefers the node whose GPUs are least allocated once the pod
	// is placed, and puts a share on the GPU with the most free room.
	PolicySpread PolicyType = "Spread"
	// PolicyPacking prefers placing a share on a GPU that is already partly
	// used, then any node already in use, then idle nodes; best-fit within each.
	PolicyPacking PolicyType = "Packing"
)

// bestFit: score = MaxScore × Σ_r w_r·allocated_r/capacity_r / Σ_r w_r, with
// the allocation taken after placing the pod, r ∈ {GPU milli, GPU memory}.
type bestFit struct{ w Weights }

func (p bestFit) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if d.IsShare() {
		return chooseShare(n, candidates, true)
	}
	return chooseWhole(n, d.Count, candidates)
}

func (p bestFit) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	return allocatedAfter(n, d, chosen, p.w)
}

// spread: score = MaxScore − the best-fit score.
type spread struct{ w Weights }

func (p spread) Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet {
	if d.IsShare() {
		return chooseShare(n, candidates, false)
	}
	return chooseWhole(n, d.Count, candidates)
}

func (p spread) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	return MaxScore - allocatedAfter(n, d, chosen, p.w)
}

// packing: score = band × MaxScore/3 + best-fit score / 3, where band is 2
// when the pod goes on a GPU that is already partly used, 1 when the node has
// any GPU allocation, 0 for an idle node.
type packing struct{ bestFit }

func (p packing) Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64 {
	band := int64(0)
	if n.UsedMilli() > 0 {
		band = 1
	}
	for i := range n.Used {
		if chosen.Has(i) && n.Used[i].Milli > 0 {
			band = 2
			break
		}
	}
	return band*(MaxScore/3) + p.bestFit.Score(n, d, h, chosen)/3
}

// allocatedAfter is the weighted allocated fraction of n's GPU compute and
// memory once d is on chosen, scaled to 0..MaxScore. A node whose GPU memory
// is unknown is scored on compute alone.
func allocatedAfter(n *NodeGPUs, d *Demand, chosen DeviceSet, w Weights) int64 {
	if n.Len() == 0 {
		return 0
	}
	capMilli := int64(n.Len()) * MilliPerGPU
	if w.Memory == 0 || n.Inventory.memoryMiB == 0 {
		// Compute alone: the chosen GPUs have room for d, so nothing is clamped.
		return MaxScore * (n.usedMilli + int64(chosen.Len())*d.Milli) / capMilli
	}
	var usedMilli, usedMem int64
	for i := range n.Used {
		milli, mem := n.Used[i].Milli, n.Used[i].MemoryMiB
		if chosen.Has(i) {
			milli += d.Milli
			mem += d.MemoryMiB
		}
		capMem := n.Inventory.Devices[i].MemoryMiB
		if milli >= MilliPerGPU {
			milli, mem = MilliPerGPU, capMem // a full GPU's memory is all taken
		}
		usedMilli += milli
		usedMem += min(mem, capMem)
	}
	capMem := n.Inventory.memoryMiB
	wGPU, wMem := float64(w.GPU), float64(w.Memory)
	frac := wGPU*float64(usedMilli)/float64(capMilli) + wMem*float64(usedMem)/float64(capMem)
	return int64(float64(MaxScore) * frac / (wGPU + wMem))
}

// chooseShare picks the candidate with the least free milli-GPU (tightest) or
// the most (loosest); ties go to less (more) free memory, then to the lower
// position.
func chooseShare(n *NodeGPUs, candidates DeviceSet, tightest bool) DeviceSet {
	best := -1
	for i := range n.Used {
		if !candidates.Has(i) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		dm := n.FreeMilli(i) - n.FreeMilli(best)
		if dm == 0 { // a tie on milli-GPU: compare memory (which reads the inventory)
			dm = n.FreeMemoryMiB(i) - n.FreeMemoryMiB(best)
		}
		if !tightest {
			dm = -dm
		}
		if dm < 0 {
			best = i
		}
	}
	return 1 << uint(best)
}

// chooseWhole picks k free GPUs, keeping them in one interconnect group when
// any group has k free: the group with the fewest free GPUs that still holds
// all k, so larger free groups stay whole for larger pods. Otherwise it spans
// as few groups as it can, taking the groups with the most free GPUs first.
// Within a group it takes the lowest positions.
func chooseWhole(n *NodeGPUs, k int, candidates DeviceSet) DeviceSet {
	groups := n.Inventory.groups
	best, bestFree := -1, MaxDevicesPerNode+1
	for g, set := range groups {
		if free := (set & candidates).Len(); free >= k && free < bestFree {
			best, bestFree = g, free
		}
	}
	if best >= 0 {
		return lowest(groups[best]&candidates, k)
	}
	var chosen DeviceSet
	for k > 0 {
		g, most := -1, 0
		for j, set := range groups {
			if free := (set & candidates &^ chosen).Len(); free > most {
				g, most = j, free
			}
		}
		take := min(k, most)
		chosen |= lowest(groups[g]&candidates&^chosen, take)
		k -= take
	}
	return chosen
}

// lowest returns the k lowest positions of s.
func lowest(s DeviceSet, k int) DeviceSet {
	var out DeviceSet
	for ; k > 0 && s != 0; k-- {
		bit := s & -s
		out |= bit
		s &^= bit
	}
	return out
}
