package gpu

import (
	"math"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
)

// ShapeWindow learns the typical pods of a live cluster from the pods the
// scheduler sees: every observed pod's shape counts with a weight that halves
// every HalfLife observations, so the distribution follows the workload as
// it changes. An optional seed distribution counts as HalfLife pods observed
// before the first. Typical is cheap: the distribution is recomputed every
// recomputeEvery observations, not on every read.
type ShapeWindow struct {
	halfLife float64

	mu       sync.Mutex
	counts   map[shapeKey]float64
	examples map[shapeKey]Demand
	// scale is the weight of the next observation; it grows by 2^(1/halfLife)
	// per observation instead of every count decaying.
	scale   float64
	pending int

	typical atomic.Pointer[[]TypicalPod]

	// seen holds the UIDs of pods already counted (ObservePod), cleared
	// when it grows past maxSeen.
	seen  sync.Map
	nSeen atomic.Int64
}

// maxSeen bounds the set of pod UIDs remembered as counted.
const maxSeen = 100_000

// ObservePod counts a pod's shape once, however many times it is seen
// (a pending pod is scheduled again and again).
func (w *ShapeWindow) ObservePod(uid types.UID, d Demand) {
	if w.halfLife <= 0 {
		return
	}
	if _, seen := w.seen.LoadOrStore(uid, struct{}{}); seen {
		return
	}
	if w.nSeen.Add(1) > maxSeen {
		w.seen.Clear()
		w.nSeen.Store(0)
	}
	w.Observe(d)
}

// ForgetPod drops a pod from the UIDs remembered as counted: the pod is
// gone and will not be seen again. Without it the set would grow with
// every pod until maxSeen clears it.
func (w *ShapeWindow) ForgetPod(uid types.UID) {
	if _, seen := w.seen.LoadAndDelete(uid); seen {
		w.nSeen.Add(-1)
	}
}

// recomputeEvery is how many observations pass between recomputations of
// the typical pods.
const recomputeEvery = 64

// shapeKey is the key under which a demand's shape is counted.
type shapeKey = DemandKey

func keyOf(d *Demand) shapeKey { return d.ShapeKey() }

// NewShapeWindow returns a window with the given half-life in observed pods
// (0: the seed alone, nothing learned) and seed distribution.
func NewShapeWindow(halfLife int64, seed []TypicalPod) *ShapeWindow {
	w := &ShapeWindow{halfLife: float64(halfLife), counts: map[shapeKey]float64{}, examples: map[shapeKey]Demand{}, scale: 1}
	mass := max(1, float64(halfLife))
	var total float64
	for _, t := range seed {
		total += t.Weight
	}
	for _, t := range seed {
		if t.Weight > 0 && total > 0 {
			k := keyOf(&t.Demand)
			w.counts[k] += mass * t.Weight / total
			w.examples[k] = t.Demand
		}
	}
	w.recompute()
	return w
}

// Observe counts one pod's shape (its demand, with MilliCPU set).
func (w *ShapeWindow) Observe(d Demand) {
	if w.halfLife <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k := keyOf(&d)
	w.counts[k] += w.scale
	if _, ok := w.examples[k]; !ok {
		w.examples[k] = d
	}
	w.scale *= math.Exp2(1 / w.halfLife)
	if w.scale > 1e100 { // renormalize before the weights overflow
		for k := range w.counts {
			w.counts[k] /= w.scale
		}
		w.scale = 1
	}
	if w.pending++; w.pending >= recomputeEvery || w.typical.Load() == nil || len(*w.typical.Load()) == 0 {
		w.recomputeLocked()
	}
}

// Typical implements Shapes.
func (w *ShapeWindow) Typical() []TypicalPod {
	if t := w.typical.Load(); t != nil {
		return *t
	}
	return nil
}

func (w *ShapeWindow) recompute() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recomputeLocked()
}

// recomputeLocked rebuilds the typical pods: the heaviest shapes covering
// TypicalCoverage of the weight, renormalized. Shapes whose weight has
// decayed to nothing are forgotten. Callers hold w.mu.
//
// The total weight is summed in the shapes' sorted order, not the map's:
// floating-point addition depends on the order, and where the heaviest
// shapes cover just TypicalCoverage of the weight (a seed of shapes of
// equal weight does), a total that differs in its last bit from one call
// to the next would keep a shape in one and drop it in the other, so that
// the same seed gave different typical pods, and a seeded simulation
// different placements.
func (w *ShapeWindow) recomputeLocked() {
	w.pending = 0
	weighted := make([]TypicalPod, 0, len(w.counts))
	for k, c := range w.counts {
		if c < w.scale*1e-9 {
			delete(w.counts, k)
			delete(w.examples, k)
			continue
		}
		weighted = append(weighted, TypicalPod{Demand: w.examples[k], Weight: c})
	}
	sortShapes(weighted)
	var total float64
	for _, s := range weighted {
		total += s.Weight
	}
	typical := topShapes(weighted, total)
	w.typical.Store(&typical)
}
