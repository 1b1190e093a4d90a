// Package gpuview is the read-only picture of a cluster's GPUs that
// kubectl gpusched and the dashboard show: who holds each GPU, what is free,
// how fragmented the free part is, which GPU pods wait and why.
//
// It is built from Node and Pod objects (and, on a cluster with DRA, its
// ResourceSlices and ResourceClaims) with the engine (pkg/gpu) alone —
// inventory, ledger, fit and the fragmentation measure the policies use — so
// what it shows is what the scheduler computes, not a re-derivation. Like the
// engine it imports only k8s.io/api and k8s.io/apimachinery: the binaries
// that show it stay small, and nothing here can write to a cluster.
package gpuview

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Snapshot is a cluster's GPUs at one moment. It is immutable once built.
type Snapshot struct {
	// Nodes are every node with GPUs, or whose GPU inventory could not be
	// read, sorted by name.
	Nodes []Node `json:"nodes"`
	// Pending are the GPU pods not yet bound to a node, in the order the
	// scheduler's queue takes them (priority, then age).
	Pending []PendingPod `json:"pending"`
	// Cluster sums the nodes.
	Cluster Totals `json:"cluster"`
	// Typical are the pod shapes the fragmentation measure weighs: the GPU
	// demands of the snapshot's pods, bound and pending.
	Typical []gpu.TypicalPod `json:"-"`

	byName map[string]int
	views  []*gpu.NodeGPUs
	nodes  []*v1.Node
	pods   []*v1.Pod
	// free is what is free on each of Nodes, in the engine's units
	// (FreeMilliCPU and FreeMemoryMiB show it).
	free []gpu.Free
	// maxima are the largest capacities of every node listed, those
	// without GPUs too, as the scheduler normalizes by (gpu.Maxima).
	maxima gpu.Maxima
	// dra is what Build read of DRA (nil without Options.DRA), and
	// draNodes marks the nodes whose GPUs a DRA driver publishes, by
	// index in Nodes.
	dra      *draRead
	draNodes []bool
	// byUID indexes pods by UID, built on first use (Pod).
	byUIDOnce sync.Once
	byUID     map[string]*v1.Pod
	// fleet counts the nodes' GPUs by model (the ledger Build read them
	// with), for the policies' prices.
	fleet gpu.Fleet
}

// Node is one node's GPUs and host resources.
type Node struct {
	Name string `json:"name"`
	// Pool is the node's pool: the value of the first of PoolLabels it
	// carries ("" when none).
	Pool string `json:"pool,omitempty"`
	// Clique is the node's NVLink clique (GPU Feature Discovery's
	// nvidia.com/gpu.clique label), "" when it has none.
	Clique string `json:"clique,omitempty"`
	// Model is the model of most of the node's GPUs.
	Model string `json:"model,omitempty"`
	// InventoryError says why the node's GPUs could not be read.
	InventoryError string `json:"inventoryError,omitempty"`
	// ReservationsError says why the node's GPU reservations
	// (gpu.AnnotationReservations) could not be read: they hold nothing.
	ReservationsError string `json:"reservationsError,omitempty"`
	// Conflicts are the bound pods' assignments that name a GPU by a UUID
	// the node now has at another index, or no longer has
	// (gpu.NodeGPUs.Conflicts).
	Conflicts []string `json:"conflicts,omitempty"`
	GPUs      []GPU    `json:"gpus"`
	// Unschedulable is the node's spec.unschedulable (cordoned).
	Unschedulable bool `json:"unschedulable,omitempty"`
	Totals
	// AllocatableMilliCPU and FreeMilliCPU are the node's CPU, allocatable
	// and not requested by its pods; likewise memory in MiB.
	AllocatableMilliCPU  int64 `json:"allocatableMilliCPU"`
	FreeMilliCPU         int64 `json:"freeMilliCPU"`
	AllocatableMemoryMiB int64 `json:"allocatableMemoryMiB"`
	FreeMemoryMiB        int64 `json:"freeMemoryMiB"`
}

// GPU is one GPU and what holds it.
type GPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid,omitempty"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	Group     string `json:"group,omitempty"`
	Unhealthy string `json:"unhealthy,omitempty"`
	// AllocatedMilli is the part of the GPU given to pods (1000 when whole
	// pods hold it); AllocatedMemoryMiB the memory shares reserve on it.
	AllocatedMilli     int64    `json:"allocatedMilli"`
	AllocatedMemoryMiB int64    `json:"allocatedMemoryMiB"`
	Holders            []Holder `json:"holders,omitempty"`
	// Reserved are the defragmenter's reservations holding part of the
	// GPU for pods to come (gpu.AnnotationReservations); AllocatedMilli
	// counts them. No fix frees them: they expire.
	Reserved []Reserved `json:"reserved,omitempty"`
}

// Reserved is a reservation's hold on one GPU.
type Reserved struct {
	ID string `json:"id"`
	// For says whom it is for: "pod <uid>", or "the next pod of <owner
	// uid> in <namespace>".
	For       string    `json:"for"`
	Milli     int64     `json:"milli"`
	MemoryMiB int64     `json:"memoryMiB,omitempty"`
	Expires   time.Time `json:"expires"`
}

// FreeMilli is the part of the GPU no pod holds.
func (g *GPU) FreeMilli() int64 { return max(0, gpu.MilliPerGPU-g.AllocatedMilli) }

// FreeMemoryMiB is the GPU's memory that no share reserves and no whole
// pod holds.
func (g *GPU) FreeMemoryMiB() int64 {
	if g.AllocatedMilli >= gpu.MilliPerGPU {
		return 0
	}
	return max(0, g.MemoryMiB-g.AllocatedMemoryMiB)
}

// Holder is a pod holding part or all of a GPU.
type Holder struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Priority  int32  `json:"priority"`
	// Milli is the pod's part of the GPU; MemoryMiB the memory its share
	// reserves (0 for a whole GPU, which holds all of it).
	Milli     int64 `json:"milli"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
}

// Totals are GPU capacity, allocation and fragmentation, of a node or of
// the cluster.
type Totals struct {
	GPUCount       int   `json:"gpuCount"`
	CapacityMilli  int64 `json:"capacityMilli"`
	AllocatedMilli int64 `json:"allocatedMilli"`
	// FragmentedMilli is the free milli-GPU that the typical pods could not
	// use, weighted by how often each comes: the measure FGD and FragFit
	// minimise and PairFit breaks ties with (gpu.NodeGPUs.Fragment).
	FragmentedMilli float64 `json:"fragmentedMilli"`
}

// FreeMilli is the capacity not allocated.
func (t *Totals) FreeMilli() int64 { return max(0, t.CapacityMilli-t.AllocatedMilli) }

// FragmentedPct is FragmentedMilli as a percentage of capacity.
func (t *Totals) FragmentedPct() float64 {
	if t.CapacityMilli == 0 {
		return 0
	}
	return 100 * t.FragmentedMilli / float64(t.CapacityMilli)
}

// AllocatedPct is AllocatedMilli as a percentage of capacity.
func (t *Totals) AllocatedPct() float64 {
	if t.CapacityMilli == 0 {
		return 0
	}
	return 100 * float64(t.AllocatedMilli) / float64(t.CapacityMilli)
}

// PendingPod is a GPU pod waiting for a node.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Demand is the engine's rendering of what it asks; DemandError is set
	// instead when its annotations are malformed.
	Demand      string    `json:"demand,omitempty"`
	DemandError string    `json:"demandError,omitempty"`
	Priority    int32     `json:"priority"`
	Created     time.Time `json:"created"`
	// Gang is the gang the pod belongs to, if any: its PodGroup's name, or
	// "workload:" and the name of its Workload API PodGroup.
	Gang string `json:"gang,omitempty"`
	// Reason is the scheduler's last word on it: the message of its
	// PodScheduled=False condition.
	Reason string `json:"reason,omitempty"`
	// QueuePosition is the pod's place (1-based) among the pending GPU pods
	// in the order the scheduler's queue takes them.
	QueuePosition int `json:"queuePosition"`

	pod    *v1.Pod
	demand gpu.Demand
}

// PoolLabels are the node labels that name a node's pool, in the order they
// are looked for: the managed clouds' node-pool labels and Karpenter's.
var PoolLabels = []string{
	"cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup",
	"kubernetes.azure.com/agentpool",
	"karpenter.sh/nodepool",
	"node.kubernetes.io/instance-type",
}

// Options tune Build.
type Options struct {
	// SchedulerNames, when set, limits Pending to pods for these
	// schedulers; every GPU pod otherwise.
	SchedulerNames []string
	// PoolLabel, when set, is the one label that names a node's pool.
	PoolLabel string
	// DRA, when set, is the cluster's DRA objects: nodes that publish GPUs
	// of its driver show those GPUs and the claims that hold them.
	DRA *DRA
}

// Build computes the snapshot of the given nodes and pods. Pods on nodes
// not listed, and finished pods, are ignored; nodes without GPUs are left
// out unless their GPU inventory is malformed.
func Build(nodes []*v1.Node, pods []*v1.Pod, opts Options) *Snapshot {
	s := &Snapshot{byName: map[string]int{}, pods: pods}
	if opts.DRA != nil {
		s.dra = opts.DRA.read()
	}
	onNode := map[string][]*v1.Pod{}
	var demands []gpu.Demand
	for _, p := range pods {
		if !gpu.InWorkload(p) {
			continue
		}
		d, claims, err := s.demandOf(p)
		if wd, ok := gpu.WorkloadDemand(p); ok {
			if claims { // its claim's shape, as GPUPlacement learns it
				wd.Count, wd.Milli, wd.MemoryMiB, wd.Models = d.Count, d.Milli, d.MemoryMiB, d.Models
			}
			demands = append(demands, wd)
		}
		if p.Spec.NodeName != "" {
			onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
			continue
		}
		if (err == nil && d.IsZero()) || errors.Is(err, errClaims) || !forScheduler(p, opts.SchedulerNames) {
			continue // no GPU pod, or not one known to be yet
		}
		s.Pending = append(s.Pending, pendingOf(p, d, err))
	}
	s.Typical = gpu.TypicalPods(demands)

	ledger := gpu.NewLedger()
	s.fleet = ledger
	sorted := slices.SortedFunc(slices.Values(nodes), func(a, b *v1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range sorted {
		view := s.dra.view(n.Name)
		onDRA := view != nil
		if !onDRA {
			view = ledger.Node(n, 1, slices.Values(onNode[n.Name]))
		}
		s.maxima.Include(n.Status.Allocatable.Cpu().MilliValue(), view.Len())
		if view.Err == nil && view.Len() == 0 {
			continue
		}
		free := gpu.FreeOn(n, onNode[n.Name])
		node := nodeOf(n, view, onNode[n.Name], free, opts.PoolLabel)
		if onDRA {
			s.dra.addHolders(&node, onNode[n.Name])
		}
		if view.Err == nil {
			node.FragmentedMilli = view.Fragment(node.FreeMilliCPU, s.Typical)
		}
		s.byName[n.Name] = len(s.Nodes)
		s.Nodes = append(s.Nodes, node)
		s.views = append(s.views, view)
		s.nodes = append(s.nodes, n)
		s.draNodes = append(s.draNodes, onDRA)
		s.free = append(s.free, free)
		s.Cluster.GPUCount += node.GPUCount
		s.Cluster.CapacityMilli += node.CapacityMilli
		s.Cluster.AllocatedMilli += node.AllocatedMilli
		s.Cluster.FragmentedMilli += node.FragmentedMilli
	}
	slices.SortStableFunc(s.Pending, func(a, b PendingPod) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.Created.Compare(b.Created),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for i := range s.Pending {
		s.Pending[i].QueuePosition = i + 1
	}
	return s
}

// demandOf is the pod's GPU demand: its annotations' or extended
// resources', else what its claims ask of the DRA driver's GPUs (claims
// true). Only nodes of the same kind take it (takes).
func (s *Snapshot) demandOf(p *v1.Pod) (d gpu.Demand, claims bool, err error) {
	d, err = gpu.DemandFromPod(p)
	if err != nil || !d.IsZero() {
		return d, false, err
	}
	d, err = s.dra.demand(p)
	return d, err == nil && !d.IsZero(), err
}

// takes reports whether node i may hold a demand of the kind: claims only
// GPUs a DRA driver publishes, other demands only GPUs gpusched assigns.
// (Whole GPUs asked for as nvidia.com/gpu that DRA serves through a
// DeviceClass, KEP-5004, are not told apart here.)
func (s *Snapshot) takes(i int, claims bool) bool { return s.draNodes[i] == claims }

// Node returns the named node, and whether the snapshot has it.
func (s *Snapshot) Node(name string) (*Node, bool) {
	i, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	return &s.Nodes[i], true
}

// nodeOf reads one node's GPUs and the pods that hold them, with free what
// is free of its CPU and memory (gpu.FreeOn).
func nodeOf(n *v1.Node, view *gpu.NodeGPUs, pods []*v1.Pod, free gpu.Free, poolLabel string) Node {
	out := Node{Name: n.Name, Pool: poolOf(n, poolLabel), Clique: n.Labels[gpu.LabelClique], Unschedulable: n.Spec.Unschedulable}
	alloc := gpu.AllocatableOf(n)
	out.AllocatableMilliCPU, out.AllocatableMemoryMiB = alloc.MilliCPU, alloc.MemoryMiB()
	out.FreeMilliCPU, out.FreeMemoryMiB = free.MilliCPU, free.MemoryMiB()
	if view.Err != nil {
		out.InventoryError = view.Err.Error()
		return out
	}
	out.Conflicts = view.Conflicts
	if view.ReservationsErr != nil {
		out.ReservationsError = view.ReservationsErr.Error()
	}
	models := map[string]int{}
	out.GPUs = make([]GPU, view.Len())
	for i, dev := range view.Inventory.Devices {
		out.GPUs[i] = GPU{Index: dev.Index, UUID: dev.UUID, Model: dev.Model, MemoryMiB: dev.MemoryMiB,
			Group: dev.Group, Unhealthy: dev.Unhealthy,
			AllocatedMilli: view.Used[i].Milli, AllocatedMemoryMiB: view.Used[i].MemoryMiB}
		models[dev.Model]++
		out.CapacityMilli += gpu.MilliPerGPU
		out.AllocatedMilli += min(view.Used[i].Milli, gpu.MilliPerGPU)
	}
	out.GPUCount = view.Len()
	out.Model = mostCommon(models)
	for _, r := range view.Reserved {
		held := Reserved{ID: r.ID, For: "pod " + string(r.Pod), Milli: r.Assignment.Milli, MemoryMiB: r.Assignment.MemoryMiB, Expires: r.Expires}
		if r.Owner != "" {
			held.For = "the next pod of " + string(r.Owner) + " in " + r.Namespace
		}
		for _, idx := range r.Assignment.Devices {
			for i := range out.GPUs {
				if out.GPUs[i].Index == idx {
					out.GPUs[i].Reserved = append(out.GPUs[i].Reserved, held)
				}
			}
		}
	}
	for _, p := range pods {
		a, ok := gpu.AssignmentOf(p)
		if !ok || a.Node != n.Name {
			continue
		}
		prio := priorityOf(p)
		for _, idx := range a.Devices {
			for i := range out.GPUs {
				if out.GPUs[i].Index == idx {
					out.GPUs[i].Holders = append(out.GPUs[i].Holders,
						Holder{Namespace: p.Namespace, Name: p.Name, Priority: prio, Milli: a.Milli, MemoryMiB: a.MemoryMiB})
				}
			}
		}
	}
	return out
}

func pendingOf(p *v1.Pod, d gpu.Demand, err error) PendingPod {
	out := PendingPod{Namespace: p.Namespace, Name: p.Name, Priority: priorityOf(p),
		Created: p.CreationTimestamp.Time, pod: p, demand: d}
	if err != nil {
		out.DemandError = err.Error()
	} else {
		out.Demand = d.String()
	}
	if g, ok := podgroup.GangOf(p); ok {
		out.Gang = g
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			out.Reason = c.Message
		}
	}
	return out
}

func poolOf(n *v1.Node, poolLabel string) string {
	if poolLabel != "" {
		return n.Labels[poolLabel]
	}
	for _, k := range PoolLabels {
		if v, ok := n.Labels[k]; ok {
			return v
		}
	}
	return ""
}

func mostCommon(counts map[string]int) string {
	best, n := "", 0
	for k, c := range counts {
		if c > n || (c == n && k < best) {
			best, n = k, c
		}
	}
	return best
}

func priorityOf(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

func forScheduler(p *v1.Pod, names []string) bool {
	return len(names) == 0 || slices.Contains(names, p.Spec.SchedulerName)
}
