package simulator

import (
	"math"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
)

// curve accumulates the allocation curve of one run, event by event.
type curve struct {
	capacity int64
	sumAlloc map[int]float64
	sumFrag  map[int]float64
	events   map[int]int
}

func newCurve(capacityMilli int64) *curve {
	return &curve{capacity: capacityMilli, sumAlloc: map[int]float64{}, sumFrag: map[int]float64{}, events: map[int]int{}}
}

// record adds one event: the cumulative arrived request, the allocated and
// the fragmented milli-GPU after the event.
func (c *curve) record(arrived, used int64, fragmented float64) {
	if c.capacity == 0 {
		return
	}
	k := int(math.RoundToEven(100 * float64(arrived) / float64(c.capacity)))
	c.sumAlloc[k] += report.Round2(100 * float64(used) / float64(c.capacity))
	c.sumFrag[k] += report.Round2(100 * fragmented / float64(c.capacity))
	c.events[k]++
}

// points is the curve, one point per non-empty bucket, in order.
func (c *curve) points() []report.Point {
	maxK := -1
	for k := range c.events {
		maxK = max(maxK, k)
	}
	var out []report.Point
	for k := 0; k <= maxK; k++ {
		if n := c.events[k]; n > 0 {
			out = append(out, report.Point{ArrivedPct: k, Events: n,
				AllocatedPct:  report.Round2(c.sumAlloc[k] / float64(n)),
				FragmentedPct: report.Round2(c.sumFrag[k] / float64(n))})
		}
	}
	return out
}

// allocatedAt is the curve's allocation at bucket k; an empty bucket takes
// the events of buckets k−1..k+1, as the FGD paper's analysis does. ok is
// false when those are empty too.
func (c *curve) allocatedAt(k int) (pct float64, ok bool) {
	if n := c.events[k]; n > 0 {
		return report.Round2(c.sumAlloc[k] / float64(n)), true
	}
	var sum float64
	var n int
	for j := k - 1; j <= k+1; j++ {
		sum, n = sum+c.sumAlloc[j], n+c.events[j]
	}
	if n == 0 {
		return 0, false
	}
	return report.Round2(sum / float64(n)), true
}

// fragTracker keeps every node's GPU state and fragmentation current as pods
// come and go, recomputing only the node that changed: each bound pod's
// assignment annotation is added to or taken from its node's view
// (gpu.NodeGPUs.With, Without), as a restarted scheduler's ledger would
// count it.
type fragTracker struct {
	typical []gpu.TypicalPod
	nodes   map[string]*trackedNode
	// order is the nodes' names in the cluster's order.
	order []string
	total float64
	// reasons holds the screen's rejection reasons as strings (reasonStrings).
	reasons map[gpu.Reasons][]string
	// atPosition is the node the screen last found at each position of the
	// list it screens (nodeAt): the scheduler lists the nodes in the same
	// order cycle after cycle, so most look-ups need no hashing of a name.
	atPosition []*trackedNode
}

type trackedNode struct {
	name string
	free gpu.Free
	frag float64
	view *gpu.NodeGPUs
}

func newFragTracker(nodes []*v1.Node, typical []gpu.TypicalPod) *fragTracker {
	t := &fragTracker{typical: typical, nodes: map[string]*trackedNode{}}
	for _, n := range nodes {
		tn := &trackedNode{name: n.Name, free: gpu.AllocatableOf(n), view: gpu.EmptyNodeGPUs(n)}
		t.nodes[n.Name] = tn
		t.order = append(t.order, n.Name)
		t.refresh(tn)
	}
	return t
}

// bind and unbind move a bound pod (with its assignment annotation) on or
// off its node.
func (t *fragTracker) bind(pod *v1.Pod)   { t.move(pod, true) }
func (t *fragTracker) unbind(pod *v1.Pod) { t.move(pod, false) }

func (t *fragTracker) move(pod *v1.Pod, on bool) {
	tn := t.nodes[pod.Spec.NodeName]
	if tn == nil {
		return
	}
	a, hasGPUs := gpu.AssignmentOf(pod)
	hasGPUs = hasGPUs && a.Node == pod.Spec.NodeName // as the ledger counts it
	switch {
	case on && hasGPUs:
		tn.view = tn.view.With(&a)
	case hasGPUs:
		tn.view = tn.view.Without(&a)
	}
	if on {
		tn.free.Take(pod)
	} else {
		tn.free.Give(pod)
	}
	t.refresh(tn)
}

// refresh recomputes the node's fragment from its view.
func (t *fragTracker) refresh(tn *trackedNode) {
	t.total -= tn.frag
	tn.frag = 0
	if tn.view.Inventory != nil {
		tn.frag = tn.view.Fragment(tn.free.MilliCPU, t.typical)
	}
	t.total += tn.frag
}

// byModel is the allocation of each GPU model, in model order.
func (t *fragTracker) byModel() []report.ModelAllocation {
	gpus := map[string]int{}
	used := map[string]int64{}
	for _, tn := range t.nodes {
		v := tn.view
		if v.Inventory == nil {
			continue
		}
		for i := range v.Used {
			m := v.Inventory.Devices[i].Model
			gpus[m]++
			used[m] += gpu.MilliPerGPU - v.FreeMilli(i)
		}
	}
	out := make([]report.ModelAllocation, 0, len(gpus))
	for m, n := range gpus {
		out = append(out, report.ModelAllocation{Model: m, GPUs: n, AllocatedPct: report.Round2(100 * float64(used[m]) / float64(n*gpu.MilliPerGPU))})
	}
	sortBy(out, func(a report.ModelAllocation) string { return a.Model })
	return out
}

// screen returns the GPU fit check for a pod: whether a node's GPUs can take
// it, and if not, why. It is gpu.Check, the check GPUPlacement's Filter
// makes, on the same allocation (both read the bound pods' assignment
// annotations, and no pod is in flight between cycles), so a node it
// rejects is one the Filter plugins would reject too. On a full cluster most
// nodes are rejected here, at a fraction of the cost of the Filter plugins.
func (t *fragTracker) screen(pod *v1.Pod) screenCheck {
	d, err := gpu.DemandFromPod(pod)
	if err != nil || d.IsZero() {
		return nil // PreFilter rejects or skips it; nothing to screen
	}
	return t.screenDemand(d)
}

// screenCheck is a screen's check of the node named node at position i of
// the list screened: whether it may take the pod, and if not, why.
type screenCheck func(i int, node string) (ok bool, reasons []string)

// nodeAt is the tracked node named name, which the screen finds at position
// i of its list; nil for a node the tracker does not know.
func (t *fragTracker) nodeAt(i int, name string) *trackedNode {
	if i < len(t.atPosition) {
		if tn := t.atPosition[i]; tn != nil && tn.name == name {
			return tn
		}
	} else {
		t.atPosition = append(t.atPosition, make([]*trackedNode, i+1-len(t.atPosition))...)
	}
	tn := t.nodes[name]
	t.atPosition[i] = tn
	return tn
}

// screenDemand is the GPU fit check for a demand (see screen).
func (t *fragTracker) screenDemand(d gpu.Demand) screenCheck {
	return func(i int, node string) (bool, []string) {
		tn := t.nodeAt(i, node)
		if tn == nil {
			return true, nil
		}
		if fit := gpu.Check(tn.view, &gpu.Request{Demand: &d}); fit.Reasons != 0 {
			return false, t.reasonStrings(fit.Reasons)
		}
		return true, nil
	}
}

// screenClaims is the screen of the DRA path, for a claim pod made from
// the trace pod traceOf holds for it. It checks what the pod's claim asks
// for, as draPod writes it: the trace pod's GPUs, or its share of one, of
// its allowed models, without its GPU memory demand (which the claim does
// not carry). Each GPU of a trace node is one device of its slice, with its
// milli-GPU's memory (draSlice), so a node gpu.Check rejects is one where
// the structured allocator finds no devices, as long as each node's GPUs
// are its count and product labels (the run turns the screen off when a
// node describes its devices one by one: draSlice does not read that).
// The nodes it rejects are counted under the reason DynamicResources'
// Filter gives a node without the devices; a node that another plugin
// would reject first is counted there too, as the annotation path's screen
// counts it under its GPU reason.
func (t *fragTracker) screenClaims(traceOf map[*v1.Pod]*v1.Pod) func(*v1.Pod) screenCheck {
	return func(pod *v1.Pod) screenCheck {
		trace := traceOf[pod]
		if trace == nil {
			return nil
		}
		d, err := gpu.DemandFromPod(trace)
		if err != nil || d.IsZero() {
			return nil
		}
		d.MemoryMiB = 0
		check := t.screenDemand(d)
		return func(i int, node string) (bool, []string) {
			if ok, _ := check(i, node); !ok {
				return false, draUnallocatable
			}
			return true, nil
		}
	}
}

// draUnallocatable is DynamicResources' Filter's reason for a node where
// the claims cannot be allocated.
var draUnallocatable = []string{"cannot allocate all claims"}

// reasonStrings is rs.Strings(), made once per set of reasons: the screen
// rejects most nodes of a full cluster, for few reasons. The callers only
// read the slice.
func (t *fragTracker) reasonStrings(rs gpu.Reasons) []string {
	out, ok := t.reasons[rs]
	if !ok {
		out = rs.Strings()
		if t.reasons == nil {
			t.reasons = map[gpu.Reasons][]string{}
		}
		t.reasons[rs] = out
	}
	return out
}
