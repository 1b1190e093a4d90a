package gpuplacement

import (
	"sync"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// featureMemo keeps each node's features (gpu.Policy.AppendFeatures) for
// each pod shape from the last cycle that described it, so that a cycle
// describes afresh only the nodes that changed: between two pods of the
// same shape, all but the nodes pods took meanwhile look the same.
//
// The features of a node are a function of what its entry records: the
// ledger's view (the same pointer while the node and its pods are
// unchanged, and never modified), the pod's shape and the request's host,
// the node's allocatable CPU and memory, the engine's choice there, and
// the policy's typical pods (gpu.Policy.FeaturesKey). The builtin score,
// which the rescaling over the cycle's feasible nodes changes, is not
// kept; requests that exclude GPUs (health) are not remembered.
type featureMemo struct {
	mu sync.Mutex
	// shapes holds each pod shape's entries; entries counts them all.
	shapes  map[gpu.DemandKey]*shapeEntries
	entries int
	// cycle is the cycle's shape's entries; typical is the policy's
	// typical pods then (begin).
	cycle   *shapeEntries
	typical gpu.AnswerKey
}

// shapeEntries are one pod shape's entries, one per node: byView finds a
// node's entry by the ledger's view of it, the cycle's question; views
// names the view each node's entry is for, so that a node's new view
// replaces its entry.
type shapeEntries struct {
	byView map[*gpu.NodeGPUs]*featureEntry
	views  map[string]*gpu.NodeGPUs
}

// featureEntry is one node's features for one pod shape, keyed by the
// ledger's view of the node, and what else they were computed from.
type featureEntry struct {
	host    gpu.Host
	alloc   [2]int64
	typical gpu.AnswerKey
	fits    bool
	chosen  gpu.DeviceSet
	// f is the features without a builtin score; its GPUs are gpus, the
	// entry's own copy.
	f    gpu.NodeFeatures
	gpus []gpu.GPUFeatures
}

// The memo holds at most shapesPerNode entries per node of the cluster, or
// minFeatureEntries when that is more; past it, it starts again empty
// (dropping the entries of nodes gone and shapes no longer seen). At 8
// GPUs a node an entry is under 1 kB, with the view it keeps alive.
const (
	shapesPerNode     = 4
	minFeatureEntries = 1024
)

// appendFeatures is gpu.Policy.AppendFeatures for a node of the cycle
// (alloc its allocatable milli-CPU and memory in MiB), answered from the
// memo when the node's entry was computed from the same inputs: the GPUs
// of features answered so are the entry's own, which the memo changes only
// when it describes that node afresh for the same shape in a later cycle.
// A nil memo computes every node. Callers hold m.mu.
func (m *featureMemo) appendFeatures(p *gpu.Policy, slab []gpu.GPUFeatures,
	view *gpu.NodeGPUs, req *gpu.Request, fits bool, chosen gpu.DeviceSet, builtin float64, alloc [2]int64) (gpu.NodeFeatures, []gpu.GPUFeatures) {
	if m == nil || req.Exclude != nil {
		return p.AppendFeatures(slab, view, req, fits, chosen, builtin, alloc[0], alloc[1])
	}
	e := m.cycle.byView[view]
	if e != nil && e.host == req.Host && e.alloc == alloc &&
		e.typical == m.typical && e.fits == fits && e.chosen == chosen {
		f := e.f // its GPUs are the entry's: see featuresInto
		if fits {
			f.BuiltinScore = builtin
		}
		return f, slab
	}
	f, slab := p.AppendFeatures(slab, view, req, fits, chosen, builtin, alloc[0], alloc[1])
	if e == nil {
		if old, ok := m.cycle.views[view.Name]; ok { // the node changed: its entry moves to the new view
			e = m.cycle.byView[old]
			delete(m.cycle.byView, old)
		} else {
			e = &featureEntry{}
			m.entries++
		}
		m.cycle.byView[view], m.cycle.views[view.Name] = e, view
	}
	*e = featureEntry{host: req.Host, alloc: alloc, typical: m.typical, fits: fits, chosen: chosen,
		f: f, gpus: append(e.gpus[:0], f.GPUs...)}
	e.f.GPUs, e.f.BuiltinScore = e.gpus, 0
	return f, slab
}

// begin readies the memo for a cycle in a cluster of n nodes, for a pod of
// the given shape and the policy's typical pods now; callers hold m.mu.
func (m *featureMemo) begin(typical gpu.AnswerKey, shape gpu.DemandKey, n int) {
	if m.shapes == nil || m.entries > max(shapesPerNode*n, minFeatureEntries) {
		m.shapes, m.entries = map[gpu.DemandKey]*shapeEntries{}, 0
	}
	m.typical, m.cycle = typical, m.shapes[shape]
	if m.cycle == nil {
		m.cycle = &shapeEntries{byView: make(map[*gpu.NodeGPUs]*featureEntry, n), views: make(map[string]*gpu.NodeGPUs, n)}
		m.shapes[shape] = m.cycle
	}
}
