package gang

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// FitEmpty places the GPU demands of a gang greedily on empty copies of the
// nodes: the largest demand first, each on the node where it leaves the
// least GPU compute free (best fit), with the engine's own fit and policy's
// choice of GPUs. It counts the placed pods; a gang whose minMember smallest demands do
// not all find GPUs this way will not find them in the live cluster either,
// whatever runs there. Pods without GPU demand always count as placed: the
// check is about GPUs only. Nodes with an invalid GPU inventory hold nothing.
//
// Greedy placement can miss a packing an exhaustive search would find, so
// FitEmpty can only err on the side of "does not fit" for gangs that exactly
// fill the cluster with mixed shapes; callers use it to reject gangs that are
// larger than the cluster, where it is exact.
func FitEmpty(nodes []*v1.Node, demands []gpu.Demand, minMember int, policy gpu.Policy) EmptyFit {
	ds := slices.Clone(demands)
	slices.SortStableFunc(ds, func(a, b gpu.Demand) int { return compareInt64(a.TotalMilli(), b.TotalMilli()) })
	if len(ds) > minMember {
		ds = ds[:minMember] // the smallest members are the ones the gang can least do without
	}
	slices.SortStableFunc(ds, func(a, b gpu.Demand) int { return compareInt64(b.TotalMilli(), a.TotalMilli()) })

	fit := EmptyFit{Needed: minMember}
	cluster := newEmptyCluster(nodes, policy)
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
	policy  gpu.Policy
	ledger  *gpu.Ledger
	used    []*emptyNode
	classes []*nodeClass
	// milli is the GPU compute of every node.
	milli int64
}

// emptyNode is a node that holds placed demands.
type emptyNode struct {
	node       *v1.Node
	pods       []*v1.Pod // the demands placed so far, as bound pods
	generation int64
	view       *gpu.NodeGPUs
}

// nodeClass is the empty nodes with one GPU inventory.
type nodeClass struct {
	view  *gpu.NodeGPUs // an empty node of the class
	empty []*v1.Node
}

func newEmptyCluster(nodes []*v1.Node, policy gpu.Policy) *emptyCluster {
	c := &emptyCluster{policy: policy, ledger: gpu.NewLedger()}
	bySignature := map[string]*nodeClass{}
	for _, node := range nodes {
		sig := InventorySignature(node)
		class, ok := bySignature[sig]
		if !ok {
			class = &nodeClass{view: c.ledger.Node(node, 0, slices.Values([]*v1.Pod(nil)))}
			bySignature[sig] = class
			c.classes = append(c.classes, class)
		}
		class.empty = append(class.empty, node)
		if class.view.Inventory != nil {
			c.milli += int64(class.view.Len()) * gpu.MilliPerGPU
		}
	}
	return c
}

// InventorySignature is what a node's GPU inventory is read from
// (gpu.InventoryFromNode): nodes with equal signatures have equal GPUs.
func InventorySignature(node *v1.Node) string {
	q := node.Status.Allocatable[gpu.ResourceGPU]
	return strings.Join([]string{node.Annotations[gpu.AnnotationDevices], q.String(),
		node.Labels[gpu.LabelProduct], node.Labels[gpu.LabelMemory], node.Labels[gpu.LabelCount], node.Labels[gpu.LabelClique]}, "\x00")
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
		if _, reasons := gpu.Place(view, d, c.policy); reasons != 0 {
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
		if len(class.empty) > 0 {
			consider(class.view, nil, class)
		}
	}
	if !found {
		return false
	}
	if best == nil { // an empty node of bestClass
		node := bestClass.empty[0]
		bestClass.empty = bestClass.empty[1:]
		best = &emptyNode{node: node, view: c.ledger.Node(node, 0, slices.Values([]*v1.Pod(nil)))}
		c.used = append(c.used, best)
	}
	chosen, reasons := gpu.Place(best.view, d, c.policy)
	if reasons != 0 {
		return false // equal inventories place alike; not reached
	}
	a := gpu.NewAssignment(best.view, d, chosen)
	best.pods = append(best.pods, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpu.AnnotationAssigned: a.String()}},
		Spec:       v1.PodSpec{NodeName: best.node.Name},
	})
	best.generation++
	best.view = c.ledger.Node(best.node, best.generation, slices.Values(best.pods))
	return true
}
