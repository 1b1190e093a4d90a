package gpuplacement

import (
	"sync/atomic"
	"unsafe"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// draFleet is the cluster's GPUs by model as the policy prices them
// (gpu.Fleet): those of the nodes the ledger has read, whose Node objects
// describe their GPUs, and those the DRA driver's slices publish. Without
// the second, PairFit would price a DRA cluster's models as if it had
// none, and spend the GPUs that model-limited claims need on pods that may
// use any (docs/dra.md). A node that publishes its GPUs both ways counts
// twice, as it is a migration state the both-ways event reports.
type draFleet struct {
	ledger *gpu.Ledger
	dra    *draReader
	last   atomic.Pointer[fleetCount]
}

// fleetCount is a census and what it was summed from.
type fleetCount struct {
	ledger gpu.ModelGPUs
	pub    *publishedGPUs
	sum    gpu.ModelGPUs
}

// fleetOf is the policy's fleet: the ledger alone without DRA.
func fleetOf(ledger *gpu.Ledger, dra *draReader) gpu.Fleet {
	if dra == nil {
		return ledger
	}
	return &draFleet{ledger: ledger, dra: dra}
}

// GPUsByModel implements gpu.Fleet. It returns the same slice until the
// sum changes, as the policy's memos require.
func (f *draFleet) GPUsByModel() gpu.ModelGPUs {
	own := f.ledger.GPUsByModel()
	pub := f.dra.last.Load()
	if pub == nil || len(pub.models) == 0 {
		return own
	}
	last := f.last.Load()
	if last != nil && last.pub == pub && sameSlice(last.ledger, own) {
		return last.sum
	}
	sum := gpu.AddModels(own, pub.models)
	if last != nil && modelsEqual(last.sum, sum) {
		sum = last.sum
	}
	f.last.Store(&fleetCount{ledger: own, pub: pub, sum: sum})
	return sum
}

func sameSlice(a, b gpu.ModelGPUs) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

func modelsEqual(a, b gpu.ModelGPUs) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
