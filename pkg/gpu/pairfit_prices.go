package gpu

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	packinglp "github.com/gpusched/gpusched/pkg/packing"
)

// sharePrices are the packing LP's weights of one set of typical pods'
// items on the fleet's models, and what they make of a GPU's free room.
//
// Without models (no typical pod limited to some, or no fleet) they are
// one price per item size. With them, the LP sorts the items onto classes
// of models (ModelItems): an item limited to a model weighs what the LP
// says its kind is worth, a GPU's room is worth the heaviest filling by
// the items its model's class may hold, and a class the limited items
// would find full has a pressure, which a pod pays on every milli-GPU it
// takes there while the class's free room is short of what the limited
// pods still to come need (pairfit_pressure.go; docs/policies.md, PairFit,
// Models).
type sharePrices struct {
	// typical and census are the typical pods and fleet census they were
	// last asked for; their backing arrays, held here, cannot be reused
	// while the prices hold them. key is what the LP was given, which the
	// weights are a function of.
	typical []TypicalPod
	census  ModelGPUs
	key     string
	// items sorts the typical pods' items onto the census, and weights
	// weighs each of its kinds.
	items   *ModelItems
	weights []float64
	// bySet weighs items by the models they are limited to: per set of
	// models of the typical pods (nil for none) the sizes, ascending, and
	// their weights. anySet weighs the others (a size or set no typical pod
	// has): per typical size, the least weight of its kinds.
	bySet  []modelSetWeights
	anySet sizeWeights
	// best[c][x] is the most weight of typical items (any number of each)
	// that class c's GPUs may hold in x milli-GPU; unlimited is best over
	// the items every model may hold, for a GPU of a model the census
	// lacks.
	best      []*[MilliPerGPU + 1]float64
	unlimited *[MilliPerGPU + 1]float64
	// pressure[c] is what a milli-GPU of class c costs a pod that takes
	// it: the share of the class's limited items that would find it full
	// (lpPressure). reserve[c] is the share of all the items' milli-GPU
	// that only class c may take (the limited items' spread, D_c / total);
	// with a FleetRoom the pressure is charged only while the class's free
	// room is short of that share of the free room (pressedBy).
	pressure []float64
	reserve  []float64
	// base, for prices with some pressure lifted (withPressure), is the
	// LP's prices they were made from, and pressed the classes still
	// charged; nil for the LP's own, which charge every class.
	base    *sharePrices
	pressed uint64
}

// modelSetWeights are the weights of the items limited to one set of
// models.
type modelSetWeights struct {
	models []string
	sizeWeights
}

// sameModelSet reports whether a and b name the same models, in any order
// and case (as Demand.AllowsModel matches them).
func sameModelSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, m := range a {
		if !slices.ContainsFunc(b, func(o string) bool { return strings.EqualFold(m, o) }) {
			return false
		}
	}
	return true
}

// sizeWeights are item sizes, ascending, and their weights.
type sizeWeights struct {
	sizes   []int64
	weights []float64
}

// weight is a share's weight: its size's, or for a size no typical pod
// has, that of the largest typical size below it (it takes at least the
// room of that one); 0 below every typical size.
func (w *sizeWeights) weight(milli int64) float64 {
	i, found := slices.BinarySearch(w.sizes, milli)
	if found {
		return w.weights[i]
	}
	if i == 0 {
		return 0
	}
	return w.weights[i-1]
}

// weightOf is the weight of one item of milli of a pod limited as d is:
// that of the typical items of its size limited to the same models, else
// (anySet) that of the typical items of the size, or below it.
func (s *sharePrices) weightOf(d *Demand, milli int64) float64 {
	for i := range s.bySet {
		set := &s.bySet[i]
		if sameModelSet(set.models, d.Models) {
			if j, found := slices.BinarySearch(set.sizes, milli); found {
				return set.weights[j]
			}
			break
		}
	}
	return s.anySet.weight(milli)
}

// nodePrices are sharePrices on one node: the class of its GPUs, looked
// up once when they are all of one model (most nodes are).
type nodePrices struct {
	s *sharePrices
	n *NodeGPUs
	// class is every GPU's class, classPerGPU when the GPUs are of
	// several models, classUnknown for a model the census lacks.
	class int
}

const (
	classPerGPU  = -1
	classUnknown = -2
)

// on is the prices of n's GPUs.
func (s *sharePrices) on(n *NodeGPUs) nodePrices {
	if len(s.best) == 1 {
		return nodePrices{s, n, 0}
	}
	if n.Inventory == nil || len(n.Inventory.Devices) == 0 {
		return nodePrices{s, n, classUnknown}
	}
	devices := n.Inventory.Devices
	for i := 1; i < len(devices); i++ {
		if devices[i].Model != devices[0].Model {
			return nodePrices{s, n, classPerGPU}
		}
	}
	return nodePrices{s, n, s.classOf(devices[0].Model)}
}

func (s *sharePrices) classOf(model string) int {
	if c, ok := s.items.ClassOf(model); ok {
		return c
	}
	return classUnknown
}

// classOf is the class of the node's GPU i.
func (p nodePrices) classOf(i int) int {
	if p.class == classPerGPU {
		return p.s.classOf(p.n.Inventory.Devices[i].Model)
	}
	return p.class
}

// room is the prices of the room of GPU i: its class's best, or for a
// model the census lacks, the unlimited items' best.
func (p nodePrices) room(i int) *[MilliPerGPU + 1]float64 {
	if c := p.classOf(i); c >= 0 {
		return p.s.best[c]
	}
	return p.s.unlimited
}

// pressure is the pressure on GPU i's class (lpPressure); 0 for a model
// the census lacks.
func (p nodePrices) pressure(i int) float64 {
	if c := p.classOf(i); c >= 0 && c < len(p.s.pressure) {
		return p.s.pressure[c]
	}
	return 0
}

// loss is the pairing loss of putting a share of milli, weighing weight,
// on a GPU with free milli-GPU free whose room is priced best:
// best[free] − (weight + best[free − milli]), the weight the GPU can no
// longer hold, rounded to whole milli-GPU. It is 0 when the share belongs
// to one of the heaviest fillings of the free room: a 470 on an idle GPU,
// whose remaining 530 another 470 fills, or on a GPU a 470 half fills.
func (s *sharePrices) loss(best *[MilliPerGPU + 1]float64, free, milli int64, weight float64) int64 {
	free = min(max(free, 0), MilliPerGPU)
	rest := min(max(free-milli, 0), MilliPerGPU)
	return int64(max(0, math.Round(best[free]-weight-best[rest])))
}

// demandWeight is what a pod's GPU items weigh: its share's weight, or
// each whole GPU's; 0 for a pod without GPUs.
func (s *sharePrices) demandWeight(d *Demand) float64 {
	size, n := d.PackingItems()
	if n == 0 {
		return 0
	}
	return float64(n) * s.weightOf(d, size)
}

// roomValue is the weight the node's free GPU room could still hold, with
// free its GPUs' free milli-GPU and hf its free CPU and memory: Σ best[f]
// over its GPUs, or 0 when no typical pod with GPUs fits in hf on the
// node's models (the room is stranded behind used-up CPU or memory).
func (p nodePrices) roomValue(free []int64, hf hostFree, typical []TypicalPod) float64 {
	var v float64
	for i, f := range free {
		v += p.room(i)[min(max(f, 0), MilliPerGPU)]
	}
	if v == 0 || !p.n.hostsGPUPod(hf, typical) { // a node without GPUs has no models to ask about
		return 0
	}
	return v
}

// hostsGPUPod reports whether some typical pod with GPUs fits in hf (CPU
// and memory) and may run on one of the node's models.
func (n *NodeGPUs) hostsGPUPod(hf hostFree, typical []TypicalPod) bool {
	for i := range typical {
		d := &typical[i].Demand
		if !d.IsZero() && d.MilliCPU <= hf.milliCPU && d.HostMemoryMiB <= hf.memoryMiB && n.allowsAny(d) {
			return true
		}
	}
	return false
}

// pricesFor returns the prices of typical on the fleet's census. Typical
// pods that changed (a ShapeWindow recomputes them every 64 pods), or a
// census that changed (a node came or its GPUs changed), are priced again
// only when what the LP is given changed (sharePrices.key): pricing takes
// the packing LP, milliseconds to a fraction of a second. Concurrent
// callers may each price a new key once. The prices handed out charge the
// pressure the fleet's free room calls for (pressedPrices).
func (c *priceCache) pricesFor(typical []TypicalPod) *sharePrices {
	var census ModelGPUs
	if c.fleet != nil {
		census = c.fleet.GPUsByModel()
	}
	last := c.prices.Load()
	if last != nil && sameTypical(last.typical, typical) && sameCensus(last.census, census) {
		return c.pressedPrices(last)
	}
	s := newSharePrices(typical, census, last)
	c.prices.Store(s)
	return c.pressedPrices(s)
}

// priceCache keeps the prices of the typical pods and fleet census last
// asked about (pricesFor), for PairFit and FragFit.
type priceCache struct {
	// fleet, when set, is the cluster's GPUs by model, which the prices of
	// model-limited typical pods depend on.
	fleet  Fleet
	prices atomic.Pointer[sharePrices]
	// pressed is the prices last handed out with the pressure the fleet's
	// free room called for (pressedPrices).
	pressed atomic.Pointer[pressedState]
}

// mixResolution is the resolution of the items' mix the LP is given: a
// mix is priced again when a kind's share of the items moves by a
// thousandth, and a census when a class's share of the LP's GPUs moves by
// one of them (lpTerms).
const mixResolution = 1000

// newSharePrices prices typical's items on census with the packing LP's
// weights (packinglp.Bound): the items in proportion (each kind's share
// of them in parts per mixResolution, at least 1), on just enough GPUs to
// hold them all (the protocol's cluster at arrived 100%), shared among
// the classes of models as the census shares the fleet's GPUs. Without a
// census the pods' models are not known to the fleet, and are left out.
// If last was priced from the same LP, its weights are taken. If the LP
// fails, every size weighs its milli-GPU.
func newSharePrices(typical []TypicalPod, census ModelGPUs, last *sharePrices) *sharePrices {
	s := &sharePrices{typical: typical, census: census}
	demands := make([]Demand, len(typical))
	copies := make([]float64, len(typical))
	for i := range typical {
		demands[i], copies[i] = typical[i].Demand, typical[i].Weight
		if len(census) == 0 {
			demands[i].Models = nil
		}
	}
	models := census
	if len(models) == 0 {
		models = ModelGPUs{{GPUs: 1}}
	}
	s.items = NewModelItems(models, demands, copies)
	counts, gpus := lpTerms(s.items)
	s.key = lpKey(s.items.Kinds, counts, gpus)
	if last != nil && last.key == s.key {
		s.weights, s.best, s.unlimited, s.pressure, s.reserve = last.weights, last.best, last.unlimited, last.pressure, last.reserve
	} else {
		s.weights = make([]float64, len(s.items.Kinds))
		cert, err := packinglp.Bound(s.items.Kinds, counts, gpus)
		for k, kind := range s.items.Kinds {
			s.weights[k] = float64(kind.Size)
			if err == nil {
				s.weights[k] = cert.Weights[k]
			}
		}
		for c := range gpus {
			s.best = append(s.best, s.heaviest(func(k packinglp.Kind) bool { return k.Allows(c) }))
		}
		s.unlimited = s.heaviest(func(k packinglp.Kind) bool { return k.Classes == nil })
		s.pressure, s.reserve = lpPressure(s.items.Kinds, counts, gpus)
	}
	s.bySet = nil
	for i := range demands {
		kind, _, ok := s.items.KindOf(&demands[i])
		if !ok {
			continue
		}
		models := typical[i].Demand.Models
		at := slices.IndexFunc(s.bySet, func(w modelSetWeights) bool { return sameModelSet(w.models, models) })
		if at < 0 {
			at = len(s.bySet)
			s.bySet = append(s.bySet, modelSetWeights{models: models})
		}
		w := &s.bySet[at]
		w.add(s.items.Kinds[kind].Size, s.weights[kind])
		s.anySet.add(s.items.Kinds[kind].Size, s.weights[kind])
	}
	return s
}

// add gives size weight, or the least of weight and the one it has.
func (w *sizeWeights) add(size int64, weight float64) {
	j, found := slices.BinarySearch(w.sizes, size)
	if found {
		w.weights[j] = min(w.weights[j], weight)
		return
	}
	w.sizes = slices.Insert(w.sizes, j, size)
	w.weights = slices.Insert(w.weights, j, weight)
}

// lpKey names what the LP is given: each kind's size, classes ("*" for
// any) and count, and each class's GPUs.
func lpKey(kinds []packinglp.Kind, counts, gpus []int64) string {
	var b strings.Builder
	for k, kind := range kinds {
		classes := "*"
		if kind.Classes != nil {
			classes = fmt.Sprint(kind.Classes)
		}
		fmt.Fprintf(&b, "%d%s×%d;", kind.Size, classes, counts[k])
	}
	fmt.Fprint(&b, gpus)
	return b.String()
}

// lpTerms is what the LP is given for items: each kind's share of the
// items in parts per mixResolution (at least 1), and per class its share
// of just enough GPUs to hold those parts (at least 1 for a class with
// GPUs).
func lpTerms(items *ModelItems) (counts, gpus []int64) {
	var total float64
	for _, a := range items.Amounts {
		total += a
	}
	counts = make([]int64, len(items.Amounts))
	var milli int64
	for k, a := range items.Amounts {
		counts[k] = max(1, int64(math.Round(a/total*mixResolution)))
		if kind := items.Kinds[k]; kind.Classes == nil || len(kind.Classes) > 0 {
			milli += counts[k] * kind.Size // items no model takes need no GPUs
		}
	}
	need := (milli + MilliPerGPU - 1) / MilliPerGPU
	var fleet int64
	for _, g := range items.ClassGPUs {
		fleet += g
	}
	gpus = make([]int64, len(items.ClassGPUs))
	for c, g := range items.ClassGPUs {
		if g > 0 && need > 0 {
			gpus[c] = max(1, int64(math.Round(float64(need)*float64(g)/float64(fleet))))
		}
	}
	return counts, gpus
}

// heaviest is the most weight of the kinds that holds admits (any number
// of each) in each room of 0..MilliPerGPU milli-GPU.
func (s *sharePrices) heaviest(holds func(packinglp.Kind) bool) *[MilliPerGPU + 1]float64 {
	best := new([MilliPerGPU + 1]float64)
	for x := 1; x <= MilliPerGPU; x++ {
		b := best[x-1]
		for k, kind := range s.items.Kinds {
			if kind.Size <= int64(x) && holds(kind) {
				b = max(b, best[x-int(kind.Size)]+s.weights[k])
			}
		}
		best[x] = b
	}
	return best
}
