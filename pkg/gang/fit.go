package gang

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// EmptyFit is the result of placing a gang on empty copies of the nodes.
type EmptyFit struct {
	// Placed is how many of the gang's pods found GPUs; Needed how many
	// must (minMember).
	Placed, Needed int
	// GPUMilli is the GPU compute the gang asks for, in milli-GPU, and
	// ClusterMilli the compute of every GPU of every node.
	GPUMilli, ClusterMilli int64
}

// Fits reports whether minMember pods of the gang found GPUs.
func (f EmptyFit) Fits() bool { return f.Placed >= f.Needed }

// Reason says why the gang cannot be placed even in an empty cluster.
func (f EmptyFit) Reason() string {
	return fmt.Sprintf("gang needs %d pods placed together but even with every GPU free only %d fit "+
		"(the gang asks for %s, the cluster has %s)", f.Needed, f.Placed, milliString(f.GPUMilli), milliString(f.ClusterMilli))
}

func milliString(m int64) string {
	if m%gpu.MilliPerGPU == 0 {
		return fmt.Sprintf("%d GPUs", m/gpu.MilliPerGPU)
	}
	return fmt.Sprintf("%.2f GPUs", float64(m)/gpu.MilliPerGPU)
}

// Cluster is the nodes a gang is checked against with every GPU free: the
// Node objects whose labels or annotation describe their GPUs, and the
// nodes whose GPUs are described elsewhere (the devices a DRA driver
// publishes in ResourceSlices), as empty views of those GPUs
// (gpu.EmptyDRANodeGPUs). A node is in one list or the other.
type Cluster struct {
	Nodes []*v1.Node
	DRA   []*gpu.NodeGPUs
}

// FitEmpty places the GPU demands of a gang greedily on empty copies of the
// nodes: the largest demand first, each on the node where it leaves the
// least GPU compute free (best fit), with the engine's own fit and choice of
// GPUs for a claim (gpu.PlaceClaim). It counts the placed pods; a gang whose minMember smallest demands do
// not all find GPUs this way will not find them in the live cluster either,
// whatever runs there. Pods without GPU demand always count as placed: the
// check is about GPUs only. Nodes with an invalid GPU inventory hold nothing.
//
// Greedy placement can miss a packing an exhaustive search would find, so
// FitEmpty can only err on the side of "does not fit" for gangs that exactly
// fill the cluster with mixed shapes; callers use it to reject gangs that are
// larger than the cluster, where it is exact.
func FitEmpty(nodes Cluster, demands []gpu.Demand, minMember int) EmptyFit {
	return fitOn(newEmptyCluster(nodes), demands, minMember)
}

// FitFree is FitEmpty on the nodes as they are: views are the nodes' GPUs
// with what is allocated on them (the ledger's), and each is its own class.
// Nodes whose inventory could not be read hold nothing.
func FitFree(views []*gpu.NodeGPUs, demands []gpu.Demand, minMember int) EmptyFit {
	c := &emptyCluster{}
	for _, v := range views {
		if v == nil || v.Inventory == nil {
			continue
		}
		c.used = append(c.used, &emptyNode{view: v})
		c.milli += int64(v.Len()) * gpu.MilliPerGPU
	}
	return fitOn(c, demands, minMember)
}

func fitOn(cluster *emptyCluster, demands []gpu.Demand, minMember int) EmptyFit {
	ds := slices.Clone(demands)
	slices.SortStableFunc(ds, func(a, b gpu.Demand) int { return compareInt64(a.TotalMilli(), b.TotalMilli()) })
	if len(ds) > minMember {
		ds = ds[:minMember] // the smallest members are the ones the gang can least do without
	}
	slices.SortStableFunc(ds, func(a, b gpu.Demand) int { return compareInt64(b.TotalMilli(), a.TotalMilli()) })

	fit := EmptyFit{Needed: minMember}
	fit.ClusterMilli = cluster.milli
	for i := range ds {
		d := &ds[i]
		fit.GPUMilli += d.TotalMilli()
		if d.IsZero() || cluster.place(d) {
			fit.Placed++
		}
	}
	return fit
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// emptyCluster is a copy of the nodes with nothing on them, filled by place.
// Nodes still empty are kept by class, nodes of one class having the same
// GPUs: they are interchangeable, so place tries one node per class and the
// nodes already used, not every node of a large cluster.
type emptyCluster struct {
	used    []*emptyNode
	classes []*nodeClass
	// milli is the GPU compute of every node.
	milli int64
}

// emptyNode is a node that holds placed demands: view is the node's GPUs
// with them allocated (gpu.NodeGPUs.With).
type emptyNode struct {
	view *gpu.NodeGPUs
}

// nodeClass is the empty nodes with one GPU inventory: view is the GPUs
// of each of them, and empty how many are left.
type nodeClass struct {
	view  *gpu.NodeGPUs
	empty int
}

func newEmptyCluster(nodes Cluster) *emptyCluster {
	c := &emptyCluster{}
	byKey := map[string]*nodeClass{}
	add := func(key string, view func() *gpu.NodeGPUs) {
		class, ok := byKey[key]
		if !ok {
			class = &nodeClass{view: view()}
			byKey[key] = class
			c.classes = append(c.classes, class)
		}
		class.empty++
		if class.view.Inventory != nil {
			c.milli += int64(class.view.Len()) * gpu.MilliPerGPU
		}
	}
	for _, node := range nodes.Nodes {
		add("node\x00"+gpu.InventorySignature(node), func() *gpu.NodeGPUs { return gpu.EmptyNodeGPUs(node) })
	}
	for _, view := range nodes.DRA {
		add("dra\x00"+inventoryKey(view.Inventory), func() *gpu.NodeGPUs { return view })
	}
	return c
}

// inventoryKey is what placement reads of an inventory, as one string:
// inventories with equal keys hold the same demands alike.
func inventoryKey(inv *gpu.Inventory) string {
	if inv == nil {
		return ""
	}
	var b strings.Builder
	for _, d := range inv.Devices {
		fmt.Fprintf(&b, "%s\x00%d\x00%s\x00%t\x01", d.Model, d.MemoryMiB, d.Group, d.Unhealthy != "")
	}
	return b.String()
}

// place puts d on the node where it leaves the least GPU compute free, and
// reports whether any node had room. Among equal nodes it prefers one
// already used.
func (c *emptyCluster) place(d *gpu.Demand) bool {
	var best *emptyNode
	var bestClass *nodeClass
	var bestLeft int64
	found := false
	consider := func(view *gpu.NodeGPUs, n *emptyNode, class *nodeClass) {
		if fit := gpu.Check(view, &gpu.Request{Demand: d}); !fit.OK() {
			return
		}
		if left := view.FreeMilliTotal() - d.TotalMilli(); !found || left < bestLeft {
			found, best, bestClass, bestLeft = true, n, class, left
		}
	}
	for _, n := range c.used {
		consider(n.view, n, nil)
	}
	for _, class := range c.classes {
		if class.empty > 0 {
			consider(class.view, nil, class)
		}
	}
	if !found {
		return false
	}
	if best == nil { // an empty node of bestClass, which holds as its view does
		bestClass.empty--
		best = &emptyNode{view: bestClass.view}
		c.used = append(c.used, best)
	}
	a, ok := gpu.PlaceClaim(best.view, d)
	if !ok {
		return false // equal inventories place alike; not reached
	}
	best.view = best.view.With(&a)
	return true
}
