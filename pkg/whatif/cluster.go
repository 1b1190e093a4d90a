package whatif

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// cluster is the question, read and checked once; every policy starts
// from its nodes.
type cluster struct {
	// nodes are Nodes then ExtraNodes with their live state; a policy's
	// run works on a copy.
	nodes []nodeState
	// rank[i] is nodes[i]'s place in the tie-break order.
	rank []int
	// maxima are the largest allocatable CPU and GPU count of any node:
	// what a host-aware policy normalizes by.
	maxima gpu.Maxima
	// capacityMilli is the GPU capacity of the nodes with a readable inventory.
	capacityMilli int64
	// typical are the typical pods of every pod, bound and new (gpu.TypicalPods).
	typical []gpu.TypicalPod
	newPods []newPod
	// fleet counts the nodes' GPUs by model, for the policies' prices.
	fleet gpu.Fleet
}

// nodeState is one node: its object, its GPUs and what its pods hold.
type nodeState struct {
	node  *v1.Node
	view  *gpu.NodeGPUs
	alloc resources
	used  resources
	// pods is the number of pods on the node.
	pods int64
}

// resources are amounts of the resources NodeResourcesFit checks: CPU in
// milli-CPU, memory and ephemeral storage in bytes, the number of pods
// (allocatable only) and every other resource by name.
type resources struct {
	milliCPU, memory, ephemeral, pods int64
	// scalar holds the other resources; it is shared between copies of a
	// node's state and replaced, never changed, when a pod is added.
	scalar map[v1.ResourceName]int64
}

// resourcesOf reads a resource list (a node's allocatable, or a pod's
// requests) as the scheduler's NodeInfo does.
func resourcesOf(list v1.ResourceList) resources {
	var r resources
	for name, q := range list {
		switch name {
		case v1.ResourceCPU:
			r.milliCPU = q.MilliValue()
		case v1.ResourceMemory:
			r.memory = q.Value()
		case v1.ResourceEphemeralStorage:
			r.ephemeral = q.Value()
		case v1.ResourcePods:
			r.pods = q.Value()
		default:
			if r.scalar == nil {
				r.scalar = map[v1.ResourceName]int64{}
			}
			r.scalar[name] = q.Value()
		}
	}
	return r
}

// add is r with a pod's requests added; r's scalar map is not changed.
func (r resources) add(pod *resources) resources {
	r.milliCPU += pod.milliCPU
	r.memory += pod.memory
	r.ephemeral += pod.ephemeral
	if len(pod.scalar) > 0 {
		scalar := make(map[v1.ResourceName]int64, len(r.scalar)+len(pod.scalar))
		for name, v := range r.scalar {
			scalar[name] = v
		}
		for name, v := range pod.scalar {
			scalar[name] += v
		}
		r.scalar = scalar
	}
	return r
}

// accumulate adds a pod's requests to r in place, for a node's state
// while it is being read (before any copy shares its scalar map).
func (r *resources) accumulate(pod *resources) {
	r.milliCPU += pod.milliCPU
	r.memory += pod.memory
	r.ephemeral += pod.ephemeral
	for name, v := range pod.scalar {
		if r.scalar == nil {
			r.scalar = map[v1.ResourceName]int64{}
		}
		r.scalar[name] += v
	}
}

// podRequests is a new pod's requests as NodeResourcesFit computes them.
func podRequests(pod *v1.Pod) resources {
	return resourcesOf(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}

// boundRequests is a bound pod's requests as the scheduler's NodeInfo sums
// them (gpu.RequestsOnNode: a container resized in place counts with the
// larger of its spec and its status).
func boundRequests(pod *v1.Pod) resources {
	return resourcesOf(gpu.RequestsOnNode(pod))
}

// newCluster reads and checks the input.
func newCluster(in Input, seed int64) (*cluster, error) {
	c := &cluster{}
	index := map[string]int{}
	var errs []error
	addNodes := func(field string, nodes []*v1.Node) {
		for i, n := range nodes {
			switch {
			case n == nil:
				errs = append(errs, fmt.Errorf("%s[%d]: want a Node, found nothing", field, i))
				continue
			case n.Name == "":
				errs = append(errs, fmt.Errorf("%s[%d]: metadata.name is empty: want the node's name", field, i))
				continue
			}
			if _, dup := index[n.Name]; dup {
				errs = append(errs, fmt.Errorf("%s[%d]: node %q is listed twice: want each node once, in nodes or extra nodes", field, i, n.Name))
				continue
			}
			index[n.Name] = len(c.nodes)
			c.nodes = append(c.nodes, nodeState{node: n, alloc: resourcesOf(n.Status.Allocatable)})
		}
	}
	addNodes("nodes", in.Nodes)
	addNodes("extraNodes", in.ExtraNodes)
	if len(c.nodes) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("nodes: want at least one node"))
	}
	demands, err := c.bind(in.Pods, index, newPodNames(in.NewPods))
	if err != nil {
		errs = append(errs, err)
	}
	for i, p := range in.NewPods {
		np, err := readNewPod(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("newPods[%d]: %w", i, err))
			continue
		}
		c.newPods = append(c.newPods, np)
		demands = append(demands, np.withHost)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.typical = gpu.TypicalPods(demands)
	c.rank = gpu.NodeOrderRank(len(c.nodes), seed)
	return c, nil
}

// newPodNames is the set of the new pods' namespace/names.
func newPodNames(pods []*v1.Pod) map[string]bool {
	out := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p != nil {
			out[podName(p)] = true
		}
	}
	return out
}

// bind counts the bound pods on their nodes: their requests as the
// scheduler's NodeInfo sums them, their GPUs as the scheduler's ledger
// counts them (gpu.Ledger.Node: the assignment annotations, then the GPUs
// best fit would give a bound GPU pod without one). It returns the
// demands of the workload's pods for the typical pods (gpu.WorkloadDemand:
// every pod not terminated, bound or pending, but a pending pod being
// deleted), in order, but those that are new pods too (isNew), which are
// counted as new pods.
func (c *cluster) bind(pods []*v1.Pod, index map[string]int, isNew map[string]bool) ([]gpu.Demand, error) {
	var errs []error
	var demands []gpu.Demand
	onNode := make([][]*v1.Pod, len(c.nodes))
	for i, p := range pods {
		if p == nil {
			errs = append(errs, fmt.Errorf("pods[%d]: want a Pod, found nothing", i))
			continue
		}
		if !gpu.HoldsNode(p) { // terminated: holds nothing, and is no longer in the workload
			continue
		}
		if d, ok := gpu.WorkloadDemand(p); ok && !isNew[podName(p)] {
			demands = append(demands, d)
		}
		_, demandErr := gpu.DemandFromPod(p)
		at, ok := index[p.Spec.NodeName]
		if p.Spec.NodeName == "" || !ok {
			continue
		}
		onNode[at] = append(onNode[at], p)
		n := &c.nodes[at]
		req := boundRequests(p)
		n.used.accumulate(&req)
		n.pods++
		// The ledger would count a malformed or foreign assignment as
		// none; here it is the input's mistake, and said so.
		if raw, has := p.Annotations[gpu.AnnotationAssigned]; has {
			a, err := gpu.ParseAssignment(raw)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("pods[%d] (%s): %w", i, podName(p), err))
			case a.Node != p.Spec.NodeName:
				errs = append(errs, fmt.Errorf("pods[%d] (%s): annotation %s names node %q, but the pod is bound to %q: want the node the pod is bound to",
					i, podName(p), gpu.AnnotationAssigned, a.Node, p.Spec.NodeName))
			}
		} else if demandErr != nil {
			errs = append(errs, fmt.Errorf("pods[%d] (%s), bound without %s: %w", i, podName(p), gpu.AnnotationAssigned, demandErr))
		}
	}
	ledger := gpu.NewLedger()
	c.fleet = ledger
	for i := range c.nodes {
		n := &c.nodes[i]
		n.view = ledger.Node(n.node, 0, slices.Values(onNode[i]))
		c.maxima.Include(n.alloc.milliCPU, n.view.Len())
		if n.view.Err == nil {
			c.capacityMilli += int64(n.view.Len()) * gpu.MilliPerGPU
		}
	}
	return demands, errors.Join(errs...)
}
