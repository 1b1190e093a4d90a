package gang

import (
	"fmt"
	"slices"

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
	for _, n := range cluster.nodes {
		if n.view.Inventory != nil {
			fit.ClusterMilli += int64(n.view.Len()) * gpu.MilliPerGPU
		}
	}
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
type emptyCluster struct {
	policy gpu.Policy
	ledger *gpu.Ledger
	nodes  []*emptyNode
}

type emptyNode struct {
	node       *v1.Node
	pods       []*v1.Pod // the demands placed so far, as bound pods
	generation int64
	view       *gpu.NodeGPUs
}

func newEmptyCluster(nodes []*v1.Node, policy gpu.Policy) *emptyCluster {
	c := &emptyCluster{policy: policy, ledger: gpu.NewLedger()}
	for _, node := range nodes {
		n := &emptyNode{node: node}
		n.view = c.ledger.Node(node, 0, slices.Values(n.pods))
		c.nodes = append(c.nodes, n)
	}
	return c
}

// place puts d on the node where it leaves the least GPU compute free, and
// reports whether any node had room.
func (c *emptyCluster) place(d *gpu.Demand) bool {
	var best *emptyNode
	var bestChosen gpu.DeviceSet
	var bestLeft int64
	for _, n := range c.nodes {
		chosen, reasons := gpu.Place(n.view, d, c.policy)
		if reasons != 0 {
			continue
		}
		if left := n.view.FreeMilliTotal() - d.TotalMilli(); best == nil || left < bestLeft {
			best, bestChosen, bestLeft = n, chosen, left
		}
	}
	if best == nil {
		return false
	}
	a := gpu.NewAssignment(best.view, d, bestChosen)
	best.pods = append(best.pods, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpu.AnnotationAssigned: a.String()}},
		Spec:       v1.PodSpec{NodeName: best.node.Name},
	})
	best.generation++
	best.view = c.ledger.Node(best.node, best.generation, slices.Values(best.pods))
	return true
}
