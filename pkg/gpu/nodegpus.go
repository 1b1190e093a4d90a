package gpu

import v1 "k8s.io/api/core/v1"

// Usage is what is allocated on one GPU.
type Usage struct {
	// Milli is the allocated part of the GPU in milli-GPU, 0..1000 (more only
	// when bound pods conflict: the ledger counts every bound pod's assignment).
	Milli int64
	// MemoryMiB is the memory reserved by shares.
	MemoryMiB int64
}

// NodeGPUs is one node's GPUs and what is allocated on them, as the ledger saw
// them at one moment. It is immutable: the ledger replaces it on every change,
// so a scheduling cycle can read it without locks.
type NodeGPUs struct {
	// Name is the node's name.
	Name string
	// Inventory is the node's GPUs; nil when Err is set.
	Inventory *Inventory
	// Err is why the node's GPU inventory could not be read, if it could not.
	Err error
	// Used is the allocation of each device, by position in Inventory.Devices.
	Used []Usage
	// usedMilli is the sum of Used[i].Milli, each clamped to the GPU's capacity.
	usedMilli int64
	// idle is the set of GPUs with nothing allocated, and maxFreeMilli the
	// most free milli-GPU of any GPU: summaries that let Check answer
	// unconstrained demands without reading every device (see summarize).
	idle         DeviceSet
	maxFreeMilli int64
	// unhealthy is Inventory's set of devices marked unhealthy, kept beside
	// the summaries that Check reads first.
	unhealthy DeviceSet
	// classes counts the pods on the node by class (see PodClass).
	classes map[PodClass]int
	// Conflicts are the assignments counted elsewhere than at the index they
	// name, or not counted, because the GPU with their UUID moved or is gone
	// (see resolve); for the front ends to report.
	Conflicts []string
	// Reserved are the reservations of the node's AnnotationReservations
	// that the view holds: not expired when it was computed, not taken by a
	// pod it counts. ReservationsErr is why the annotation could not be
	// read (the view then holds none).
	Reserved        []Reservation
	ReservationsErr error
	// memo holds the policies' answers about this view (see
	// Policy.PlaceAndScore); nil for a view built outside this package's
	// constructors, which is then answered afresh every time.
	memo *viewMemo
}

func newNodeGPUs(name string, inv *Inventory, err error) *NodeGPUs {
	n := &NodeGPUs{Name: name, Inventory: inv, Err: err, memo: &viewMemo{}}
	if inv != nil {
		n.Used = make([]Usage, inv.Len())
		n.unhealthy = inv.unhealthy
	}
	n.summarize()
	return n
}

// summarize computes idle and maxFreeMilli from Used; it is called once a
// view is complete.
func (n *NodeGPUs) summarize() {
	n.idle, n.maxFreeMilli = 0, 0
	for i := range n.Used {
		if n.Used[i].Milli == 0 {
			n.idle |= 1 << uint(i)
		}
		n.maxFreeMilli = max(n.maxFreeMilli, n.FreeMilli(i))
	}
}

// Len is the number of GPUs; 0 for a node whose inventory is invalid.
func (n *NodeGPUs) Len() int { return len(n.Used) }

// FreeMilli is the unallocated part of device i, never below 0.
func (n *NodeGPUs) FreeMilli(i int) int64 {
	return max(0, MilliPerGPU-n.Used[i].Milli)
}

// FreeMemoryMiB is the unreserved memory of device i: 0 for a GPU with nothing
// free, since a whole-GPU pod owns all of its GPU's memory.
func (n *NodeGPUs) FreeMemoryMiB(i int) int64 {
	if n.Used[i].Milli >= MilliPerGPU {
		return 0
	}
	return max(0, n.Inventory.Devices[i].MemoryMiB-n.Used[i].MemoryMiB)
}

// UsedMilli is the node's allocated milli-GPU, each GPU counted up to its capacity.
func (n *NodeGPUs) UsedMilli() int64 { return n.usedMilli }

// FreeMilliTotal is the node's unallocated milli-GPU.
func (n *NodeGPUs) FreeMilliTotal() int64 {
	return int64(n.Len())*MilliPerGPU - n.usedMilli
}

// clone returns a copy of n that add may change.
func (n *NodeGPUs) clone() *NodeGPUs {
	out := *n
	out.memo = &viewMemo{} // the answers about n are not about out
	out.Used = append([]Usage(nil), n.Used...)
	out.Conflicts = n.Conflicts[:len(n.Conflicts):len(n.Conflicts)] // appends to out do not reach n
	out.classes = make(map[PodClass]int, len(n.classes))
	for c, count := range n.classes {
		out.classes[c] = count
	}
	return &out
}

// add counts an assignment on n, which is still being built. GPUs the
// inventory does not have are ignored.
func (n *NodeGPUs) add(a *Assignment) {
	n.apply(a, 1)
}

func (n *NodeGPUs) apply(a *Assignment, sign int64) {
	if n.classes == nil {
		n.classes = map[PodClass]int{}
	}
	n.classes[ClassOf(a.Milli, len(a.Devices))] += int(sign)
	for k := range a.Devices {
		i, conflict := n.Inventory.resolve(a, k)
		if conflict != "" && sign > 0 {
			n.Conflicts = append(n.Conflicts, conflict)
		}
		if i < 0 {
			continue
		}
		before := min(MilliPerGPU, max(0, n.Used[i].Milli))
		n.Used[i].Milli += sign * a.Milli
		if a.Milli < MilliPerGPU {
			n.Used[i].MemoryMiB += sign * a.MemoryMiB
		}
		n.usedMilli += min(MilliPerGPU, max(0, n.Used[i].Milli)) - before
	}
}

// PodClass groups GPU pods by shape: a share of one GPU, or a number of
// whole GPUs.
type PodClass int

// ClassShare is the class of pods that take a share of one GPU; a class n > 0
// holds the pods that take n whole GPUs.
const ClassShare PodClass = 0

// ClassOf is the class of a pod taking milli-GPU on each of count GPUs.
func ClassOf(milli int64, count int) PodClass {
	if milli < MilliPerGPU {
		return ClassShare
	}
	return PodClass(count)
}

// PodsOfClass is the number of pods of class c on the node.
func (n *NodeGPUs) PodsOfClass(c PodClass) int { return n.classes[c] }

// HasOtherClasses reports whether the node holds GPU pods of a class other than c.
func (n *NodeGPUs) HasOtherClasses(c PodClass) bool {
	for class, count := range n.classes {
		if class != c && count > 0 {
			return true
		}
	}
	return false
}

// EmptyNodeGPUs is the node's GPUs with nothing allocated on them: the start
// of a what-if (see With).
func EmptyNodeGPUs(node *v1.Node) *NodeGPUs {
	inv, err := InventoryFromNode(node)
	return newNodeGPUs(node.Name, inv, err)
}

// With is a new view of n with a's GPUs allocated as well: what the node
// would look like were a bound there. n is unchanged. GPUs the inventory
// does not have are ignored, as the ledger ignores them; an assignment for
// another node is the caller's mistake and is counted all the same.
func (n *NodeGPUs) With(a *Assignment) *NodeGPUs {
	return n.whatIf(a, 1)
}

// Without is a new view of n with a's GPUs given back: what the node would
// look like were the pod holding a gone (preemption's question). a must be
// an assignment counted in n.
func (n *NodeGPUs) Without(a *Assignment) *NodeGPUs {
	return n.whatIf(a, -1)
}

func (n *NodeGPUs) whatIf(a *Assignment, sign int64) *NodeGPUs {
	if n.Inventory == nil {
		return n
	}
	out := n.clone()
	out.apply(a, sign)
	out.summarize()
	return out
}
