package dra

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// draFleet is the cluster's GPUs by model as the policy prices them
// (gpu.Fleet): those of the nodes the ledger has read, whose Node objects
// describe their GPUs, and those the DRA driver's slices publish. Without
// the second, PairFit would price a DRA cluster's models as if it had
// none, and spend the GPUs that model-limited claims need on pods that may
// use any (docs/dra.md). A node that publishes GPUs of the driver counts
// once, by its slices: the GPUs its labels describe (the ledger reads every
// node, GPU Feature Discovery labels DRA nodes too) are the same GPUs, and
// GPUPlacement leaves them to DRA.
type draFleet struct {
	ledger   *gpu.Ledger
	dra      *Reader
	last     atomic.Pointer[fleetCount]
	lastRoom atomic.Pointer[roomSum]
}

// fleetCount is a census and what it was summed from.
type fleetCount struct {
	ledger gpu.ModelGPUs
	pub    *publishedGPUs
	sum    gpu.ModelGPUs
}

// FleetOf is the policy's fleet: the ledger alone without DRA.
func FleetOf(ledger *gpu.Ledger, dra *Reader) gpu.Fleet {
	if dra == nil {
		return ledger
	}
	return &draFleet{ledger: ledger, dra: dra}
}

// GPUsByModel implements gpu.Fleet. It returns the same slice until the
// sum changes, as the policy's memos require, also when goroutines race
// to sum a change.
func (f *draFleet) GPUsByModel() gpu.ModelGPUs {
	for {
		own, pub := f.ledger.GPUsByModel(), f.dra.last.Load()
		if pub == nil || len(pub.models) == 0 {
			return own
		}
		last := f.last.Load()
		if last != nil && last.pub == pub && sameSlice(last.ledger, own) {
			return last.sum
		}
		sum := f.sum(own, pub)
		if last != nil && slices.Equal(last.sum, sum) {
			sum = last.sum
		}
		if f.last.CompareAndSwap(last, &fleetCount{ledger: own, pub: pub, sum: sum}) {
			return sum
		}
	}
}

// sum is the ledger's census without the GPUs it read of nodes that
// publish GPUs of the driver, plus the published GPUs.
func (f *draFleet) sum(own gpu.ModelGPUs, pub *publishedGPUs) gpu.ModelGPUs {
	var read []*gpu.Inventory
	for node := range pub.nodes {
		if inv := f.ledger.InventoryOf(node); inv != nil {
			read = append(read, inv)
		}
	}
	return gpu.AddModels(gpu.AddModels(own, pub.models), gpu.NegateModels(gpu.CountModels(read)))
}

func sameSlice(a, b gpu.ModelGPUs) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// RoomByModel implements gpu.FleetRoom: the free room of the ledger's
// views without the nodes that publish GPUs of the driver, plus the free
// room of those nodes' GPUs with what DRA's claims hold of them in the last
// cycle read (in flight included). It is summed again when either changes,
// and the same *gpu.FreeRoom handed out while the sum stays the same, also
// when goroutines race to sum a change.
func (f *draFleet) RoomByModel() *gpu.FreeRoom {
	for {
		own := f.ledger.RoomByModel()
		cycle := f.dra.lastCycle.Load()
		if cycle == nil || len(cycle.nodes) == 0 {
			return own
		}
		last := f.lastRoom.Load()
		if last != nil && last.own == own && last.cycle == cycle {
			return last.sum
		}
		add := make([]*gpu.NodeGPUs, 0, len(cycle.nodes))
		drop := make([]*gpu.NodeGPUs, 0, len(cycle.nodes))
		for node, inv := range cycle.nodes {
			add = append(add, cycle.viewOf(node, inv))
			drop = append(drop, f.ledger.RoomView(node))
		}
		sum := gpu.RoomOfViews(own, add, drop)
		if last != nil && last.sum.Equal(sum) {
			sum = last.sum
		}
		if f.lastRoom.CompareAndSwap(last, &roomSum{own: own, cycle: cycle, sum: sum}) {
			return sum
		}
	}
}

// roomSum is a room draFleet summed and what it summed.
type roomSum struct {
	own   *gpu.FreeRoom
	cycle *Cycle
	sum   *gpu.FreeRoom
}
