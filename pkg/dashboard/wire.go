package dashboard

import (
	"math"
	"slices"
	"time"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Wire is the snapshot as /api/snapshot serves it to the page: compact, so
// that 5000 nodes of 8 GPUs stay near a megabyte (about 150 kB gzipped).
// GPU models and pools are interned in Models and Pools; a node refers to
// them by index. Holders are left out: /api/node gives a node's in full.
type Wire struct {
	Version uint64     `json:"version"`
	Built   time.Time  `json:"built"`
	Cluster WireTotals `json:"cluster"`
	// Models and Pools are the distinct GPU models and node pools, sorted;
	// Pools[0] is "" (no pool) when some node has none.
	Models []string   `json:"models"`
	Pools  []string   `json:"pools"`
	Nodes  []WireNode `json:"nodes"`
	// PendingTotal counts every pending GPU pod; Pending lists the first
	// ones in queue order, at most the server's MaxPending.
	PendingTotal    int            `json:"pendingTotal"`
	PendingByReason map[string]int `json:"pendingByReason"`
	Pending         []WirePending  `json:"pending"`
}

// WireTotals are the cluster's GPU totals.
type WireTotals struct {
	Nodes           int     `json:"nodes"`
	GPUs            int     `json:"gpus"`
	CapacityMilli   int64   `json:"capacityMilli"`
	AllocatedMilli  int64   `json:"allocatedMilli"`
	FragmentedMilli float64 `json:"fragmentedMilli"`
	FragmentedPct   float64 `json:"fragmentedPct"`
	AllocatedPct    float64 `json:"allocatedPct"`
	// InvalidNodes counts nodes whose GPU inventory could not be read.
	InvalidNodes int `json:"invalidNodes"`
}

// WireNode is one node: its GPUs' allocated milli-GPU in index order.
type WireNode struct {
	Name string `json:"n"`
	// Pool and Model index Wire.Pools and Wire.Models (Model: the node's
	// most common GPU model).
	Pool  int `json:"p"`
	Model int `json:"m"`
	// Fragmented is the node's fragmented milli-GPU (one decimal); Free
	// its free milli-GPU.
	Fragmented float64 `json:"f"`
	Free       int64   `json:"fr"`
	Cordoned   bool    `json:"c,omitempty"`
	// Error is why the node's GPU inventory could not be read.
	Error string `json:"e,omitempty"`
	// Alloc is each GPU's allocated milli-GPU; MemAlloc and MemCap its
	// reserved and total memory in MiB.
	Alloc    []int64 `json:"a"`
	MemAlloc []int64 `json:"ma"`
	MemCap   []int64 `json:"mc"`
	// Unhealthy maps a GPU's position in Alloc to why it is unhealthy.
	Unhealthy map[int]string `json:"x,omitempty"`
	// GPUModels, set only on nodes that mix models, indexes Wire.Models
	// per GPU.
	GPUModels []int `json:"gm,omitempty"`
}

// WirePending is one pending GPU pod.
type WirePending struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"name"`
	Demand    string    `json:"demand,omitempty"`
	Error     string    `json:"error,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Class     string    `json:"class"`
	Position  int       `json:"pos"`
	Priority  int32     `json:"prio"`
	Gang      string    `json:"gang,omitempty"`
	Created   time.Time `json:"created"`
}

// wireOf encodes snap; maxPending caps the pending list (0: no cap).
func wireOf(snap *gpuview.Snapshot, version uint64, built time.Time, maxPending int) *Wire {
	c := &snap.Cluster
	w := &Wire{Version: version, Built: built, Cluster: WireTotals{
		Nodes: len(snap.Nodes), GPUs: c.GPUCount, CapacityMilli: c.CapacityMilli, AllocatedMilli: c.AllocatedMilli,
		FragmentedMilli: round1(c.FragmentedMilli), FragmentedPct: round1(c.FragmentedPct()), AllocatedPct: round1(c.AllocatedPct()),
	}, Nodes: make([]WireNode, len(snap.Nodes)), PendingTotal: len(snap.Pending), PendingByReason: map[string]int{}}

	models, pools := map[string]int{}, map[string]int{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		pools[n.Pool] = 0
		models[n.Model] = 0
		for _, g := range n.GPUs {
			models[g.Model] = 0
		}
	}
	w.Models, w.Pools = indexOf(models), indexOf(pools)

	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		wn := WireNode{Name: n.Name, Pool: pools[n.Pool], Model: models[n.Model], Fragmented: round1(n.FragmentedMilli),
			Free: n.FreeMilli(), Cordoned: n.Unschedulable, Error: n.InventoryError,
			Alloc: make([]int64, len(n.GPUs)), MemAlloc: make([]int64, len(n.GPUs)), MemCap: make([]int64, len(n.GPUs))}
		if n.InventoryError != "" {
			w.Cluster.InvalidNodes++
		}
		mixed := false
		for j, g := range n.GPUs {
			wn.Alloc[j], wn.MemAlloc[j], wn.MemCap[j] = g.AllocatedMilli, allocatedMemory(&n.GPUs[j]), g.MemoryMiB
			if g.Unhealthy != "" {
				if wn.Unhealthy == nil {
					wn.Unhealthy = map[int]string{}
				}
				wn.Unhealthy[j] = g.Unhealthy
			}
			mixed = mixed || g.Model != n.Model
		}
		if mixed {
			wn.GPUModels = make([]int, len(n.GPUs))
			for j, g := range n.GPUs {
				wn.GPUModels[j] = models[g.Model]
			}
		}
		w.Nodes[i] = wn
	}

	for i := range snap.Pending {
		p := &snap.Pending[i]
		class := ReasonClass(p)
		w.PendingByReason[class]++
		if maxPending > 0 && len(w.Pending) >= maxPending {
			continue
		}
		w.Pending = append(w.Pending, WirePending{Namespace: p.Namespace, Name: p.Name, Demand: p.Demand,
			Error: p.DemandError, Reason: p.Reason, Class: class, Position: p.QueuePosition,
			Priority: p.Priority, Gang: p.Gang, Created: p.Created})
	}
	if w.Pending == nil {
		w.Pending = []WirePending{}
	}
	return w
}

// indexOf sorts the keys of m, numbers them in m, and returns them.
func indexOf(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		m[k] = i
	}
	return keys
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
