package gpu

import "slices"

// Fleet is what a policy may know of the cluster beyond the node it
// scores: its GPUs by model. PairFit prices a model's GPUs by how many the
// workload's model-limited pods need of them (see docs/policies.md).
// A front end hands its Ledger, which counts every node it has read.
type Fleet interface {
	// GPUsByModel is the cluster's GPUs by model. A fleet returns the same
	// slice until its count changes, and never modifies one it returned.
	GPUsByModel() ModelGPUs
}

// GPUsByModel counts the GPUs of every node the ledger has read, by
// model, as each node's inventory last read says. It counts the nodes a
// front end read to place a GPU pod (kube-scheduler reads only part of a
// large cluster per cycle, another part the next), not every node of the
// cluster, and forgets one only when the front end removes it
// (RemoveNode, on the node's deletion). Nodes the plugin reads
// through DRA's ResourceSlices alone are not counted (GPUPlacement adds
// them to the census it prices with: draFleet).
func (l *Ledger) GPUsByModel() ModelGPUs {
	if c := l.census.Load(); c != nil {
		return *c
	}
	return nil
}

// recount moves a node's GPUs in the census from its previous inventory
// to its next one, and publishes a new census when that changed it: a
// policy prices models again, and forgets the answers it remembered with
// each node's view (PlaceAndScore), for each census published.
// Callers hold l.mu.
func (l *Ledger) recount(prev, next *Inventory) {
	if prev == next || sameModels(prev, next) {
		return // most often a node's status changed, not its GPUs
	}
	if l.modelCounts == nil {
		l.modelCounts = map[string]int64{}
	}
	changed := false
	for _, step := range []struct {
		inv   *Inventory
		delta int64
	}{{prev, -1}, {next, +1}} {
		if step.inv == nil {
			continue
		}
		for i := range step.inv.Devices {
			l.modelCounts[step.inv.Devices[i].Model] += step.delta
			changed = true
		}
	}
	if census := modelGPUsOf(l.modelCounts); changed && !slices.Equal(census, l.GPUsByModel()) {
		l.census.Store(&census)
	}
}

// sameModels reports whether two inventories list GPUs of the same
// models in the same order.
func sameModels(a, b *Inventory) bool {
	if a == nil || b == nil || len(a.Devices) != len(b.Devices) {
		return false
	}
	for i := range a.Devices {
		if a.Devices[i].Model != b.Devices[i].Model {
			return false
		}
	}
	return true
}

// InventoryOf is the node's inventory as the ledger last read it; nil for a
// node it has not read or whose inventory was invalid.
func (l *Ledger) InventoryOf(node string) *Inventory {
	if c := l.cached(node); c != nil {
		return c.inv
	}
	return nil
}
