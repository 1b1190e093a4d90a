package extender

import (
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Cluster is the extender's view of the cluster, fed by informers: every Node
// object, and per node name the pods bound to it, with a generation that
// changes whenever the node or any of its pods changes. It is what
// gpu.Ledger.Node reads a node's GPUs from, as the scheduler's NodeInfo is in
// plugin mode; so a started (or restarted) extender rebuilds every GPU's
// allocation from the assignment annotations of the bound pods the informers
// list first.
//
// Besides what the informers deliver, the view holds the pods the extender is
// binding or has just bound (Hold): a copy with spec.nodeName and the
// assignment annotation, which the informer's own event for the pod later
// replaces (same UID). Unbound pods are not tracked; spec.nodeName is never
// unset, so an older, unbound version of a held pod arriving late from the
// informer changes nothing.
//
// Terminated pods stay in the lists until deleted; the engine ignores them.
//
// A Cluster is safe for concurrent use. NodeStates are immutable snapshots:
// a reader takes them under a read lock and uses them without one.
type Cluster struct {
	podLister corelisters.PodLister
	synced    []cache.InformerSynced

	mu sync.RWMutex
	// nodes maps a node name to its current state. An entry exists while a
	// Node object or a bound pod names the node.
	nodes map[string]*NodeState
	// podNode maps the UID of every tracked pod to its node's name.
	podNode map[types.UID]string
	// generation is the last generation handed out; every change takes the next.
	generation int64

	// nodeChanges counts changes to Node objects and ResourceSlices, and
	// maximaMemo holds the largest node capacities as of a count (see
	// maxima).
	nodeChanges atomic.Int64
	maximaMemo  atomic.Pointer[maxima]

	// dra is which nodes' GPUs a DRA driver hands out; nil when the view
	// does not watch DRA (WatchDRA).
	dra *draNodes
	// reservations are the nodes' GPU reservations (the defragmenter's),
	// so that a pod a reservation is for goes to its node.
	reservations gpu.ReservationIndex
	// onNodeGone, when set (New), hears of each node deleted from the
	// cluster: the extender's ledger forgets it (gpu.Ledger.RemoveNode).
	onNodeGone atomic.Pointer[func(node string)]
}

// NodeState is one node as the Cluster saw it at one moment. Immutable but
// for a memo.
type NodeState struct {
	// Node is the Node object; nil while no Node object with this name is
	// known (its pods may be, when the node is deleted or not yet listed).
	Node *v1.Node
	// Generation changes whenever Node or Pods change; it is unique within
	// the Cluster, never reused, and always positive.
	Generation int64
	// Pods are the pods bound (or being bound by this extender) to the node.
	Pods []*v1.Pod

	// gpus memoizes the ledger's view of Node with these Pods (see
	// Extender.view), so that reading an unchanged node costs one atomic
	// load. The memos are the only mutable fields, each a cache set at most
	// once per value.
	gpus atomic.Pointer[gpu.NodeGPUs]
	// free memoizes what is free on Node (freeOf).
	free atomic.Pointer[gpu.Free]
	// capacity is Node's alone as the cluster's maxima count it, read once
	// per Node object (maxima reads every node's after any node changes).
	capacity gpu.Maxima
}

// PodSeq yields the node's pods, as gpu.Ledger.Node wants them. A nil state
// yields none.
func (s *NodeState) PodSeq() iter.Seq[*v1.Pod] {
	if s == nil {
		return func(func(*v1.Pod) bool) {}
	}
	return slices.Values(s.Pods)
}

// NewCluster returns a view fed by the factory's node and pod informers. The
// caller starts the factory; HasSynced reports when the initial lists have
// been processed.
func NewCluster(factory informers.SharedInformerFactory) (*Cluster, error) {
	c := newCluster()
	pods := factory.Core().V1().Pods()
	c.podLister = pods.Lister()
	podReg, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onPod(obj) },
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: c.onPodDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	nodeReg, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(obj) },
		UpdateFunc: func(_, obj any) { c.onNode(obj) },
		DeleteFunc: c.onNodeDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("watching nodes: %w", err)
	}
	c.synced = []cache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced}
	return c, nil
}

func newCluster() *Cluster {
	return &Cluster{nodes: map[string]*NodeState{}, podNode: map[types.UID]string{}}
}

// HasSynced reports whether the informers' initial lists have been delivered
// to the view: until then a node's GPUs may look freer than they are.
func (c *Cluster) HasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// PodLister lists the informer's pods, bound or not.
func (c *Cluster) PodLister() corelisters.PodLister { return c.podLister }

// Node returns the node's current state, or nil when nothing is known of it.
func (c *Cluster) Node(name string) *NodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[name]
}

// resolve sets each candidate's state (nil for an unknown node), under one
// read lock: a request names thousands of nodes.
func (c *Cluster) resolve(cands []candidate) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range cands {
		cands[i].state = c.nodes[cands[i].name]
	}
}

// BoundPod returns the tracked pod with the given UID, if it is bound (or
// being bound by this extender) to a node.
func (c *Cluster) BoundPod(uid types.UID) (*v1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	name, ok := c.podNode[uid]
	if !ok {
		return nil, false
	}
	for _, p := range c.nodes[name].Pods {
		if p.UID == uid {
			return p, true
		}
	}
	return nil, false
}

// Hold puts pod, which must have spec.nodeName set, on its node before the
// informer reports it bound: the extender is binding it. It does nothing and
// returns false if the informer already reports the pod bound.
func (c *Cluster) Hold(pod *v1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.podNode[pod.UID]; ok {
		return false
	}
	c.putPod(pod)
	return true
}

// Release removes a pod put there by Hold, after its binding failed; it does
// nothing if the informer has replaced the held copy since (the pod is bound).
func (c *Cluster) Release(held *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name, ok := c.podNode[held.UID]; ok && slices.Contains(c.nodes[name].Pods, held) {
		c.removePod(held.UID)
	}
}

func (c *Cluster) onPod(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return // an unbound pod holds nothing; a held pod stays held
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putPod(pod)
}

// deleted returns the object of a delete event, unwrapping the tombstone an
// informer delivers when it missed the deletion itself.
func deleted[T any](obj any) (T, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

func (c *Cluster) onPodDelete(obj any) {
	pod, ok := deleted[*v1.Pod](obj)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removePod(pod.UID)
}

func (c *Cluster) onNode(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	var capacity gpu.Maxima
	capacity.IncludeNode(node)
	c.reservations.Set(node)
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.copyState(node.Name)
	next.Node, next.capacity = node, capacity
	c.nodes[node.Name] = next
	c.nodeChanges.Add(1)
}

func (c *Cluster) onNodeDelete(obj any) {
	node, ok := deleted[*v1.Node](obj)
	if !ok {
		return
	}
	c.reservations.Remove(node.Name)
	c.mu.Lock()
	next := c.copyState(node.Name)
	next.Node, next.capacity = nil, gpu.Maxima{}
	c.store(node.Name, next)
	c.nodeChanges.Add(1)
	c.mu.Unlock()
	// After the node left the view, so that no request reads it back in.
	if gone := c.onNodeGone.Load(); gone != nil {
		(*gone)(node.Name)
	}
}

// putPod adds pod to its node, replacing the version with the same UID.
// Callers hold c.mu for writing.
func (c *Cluster) putPod(pod *v1.Pod) {
	name := pod.Spec.NodeName
	if old, ok := c.podNode[pod.UID]; ok && old != name {
		c.removePod(pod.UID) // not expected: spec.nodeName is immutable once set
	}
	next := c.copyState(name)
	if i := slices.IndexFunc(next.Pods, func(p *v1.Pod) bool { return p.UID == pod.UID }); i >= 0 {
		next.Pods[i] = pod
	} else {
		next.Pods = append(next.Pods, pod)
	}
	c.nodes[name] = next
	c.podNode[pod.UID] = name
}

// removePod removes the pod with the given UID from its node. Callers hold
// c.mu for writing.
func (c *Cluster) removePod(uid types.UID) {
	name, ok := c.podNode[uid]
	if !ok {
		return
	}
	delete(c.podNode, uid)
	next := c.copyState(name)
	next.Pods = slices.DeleteFunc(next.Pods, func(p *v1.Pod) bool { return p.UID == uid })
	c.store(name, next)
}

// copyState returns a copy of the node's state, with its own pod slice and
// the next generation. Callers hold c.mu for writing.
func (c *Cluster) copyState(name string) *NodeState {
	c.generation++
	next := &NodeState{Generation: c.generation}
	if old := c.nodes[name]; old != nil {
		next.Node, next.capacity = old.Node, old.capacity
		next.Pods = slices.Clone(old.Pods)
	}
	return next
}

// store sets the node's state, dropping it when nothing names the node.
func (c *Cluster) store(name string, s *NodeState) {
	if s.Node == nil && len(s.Pods) == 0 {
		delete(c.nodes, name)
		return
	}
	c.nodes[name] = s
}
