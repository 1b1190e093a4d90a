package gpuplacement

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// reservationIndex is where the nodes' gpu.AnnotationReservations are,
// kept from the node informer, so that PreFilter sends a pod that may take
// a reservation to the reserved nodes alone without reading every node.
// The ledger's views decide what a reservation holds and who takes it
// (gpu.NodeGPUs.ReservationFor); the index only narrows the nodes, to
// those whose reservation the ledger still holds (not taken by another pod
// of the owner: gpu.Ledger.HoldsReservation), and a node it names wrongly
// (its view not updated yet) just does not fit.
type reservationIndex struct {
	mu     sync.RWMutex
	byNode map[string][]gpu.Reservation
	// nodes is len(byNode), read without the lock: most cycles find none.
	nodes atomic.Int64
}

// set records the node's reservations (none when its annotation is absent
// or malformed: the ledger reports that with the node's view).
func (x *reservationIndex) set(node *v1.Node) {
	rs, _ := gpu.ReservationsOf(node)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byNode == nil {
		x.byNode = map[string][]gpu.Reservation{}
	}
	if len(rs) == 0 {
		delete(x.byNode, node.Name)
	} else {
		x.byNode[node.Name] = rs
	}
	x.nodes.Store(int64(len(x.byNode)))
}

func (x *reservationIndex) remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byNode, name)
	x.nodes.Store(int64(len(x.byNode)))
}

// nodesFor is the nodes with a current reservation that pod (of demand d)
// may take and that holds says is still held; nil when there are none.
func (x *reservationIndex) nodesFor(pod *v1.Pod, d *gpu.Demand, holds func(id string) bool) sets.Set[string] {
	if x.nodes.Load() == 0 {
		return nil
	}
	now := time.Now()
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out sets.Set[string]
	for node, rs := range x.byNode {
		for i := range rs {
			if rs[i].Current(now) && rs[i].Reserves(pod, d) && holds(rs[i].ID) {
				if out == nil {
					out = sets.New[string]()
				}
				out.Insert(node)
				break
			}
		}
	}
	return out
}

// followReservations keeps p.reservations from the node informer. A
// handle without an informer factory (the plugin's unit tests, which add
// reservations to the index themselves) has none to follow.
func (p *GPUPlacement) followReservations() error {
	factory := p.handle.SharedInformerFactory()
	if factory == nil {
		return nil
	}
	set := func(obj any) {
		if node, ok := obj.(*v1.Node); ok {
			p.reservations.set(node)
		}
	}
	_, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				p.reservations.remove(node.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: watching node reservations: %w", Name, err)
	}
	return nil
}

// reservedView is the ledger's view of the node for the cycle's pod: with
// the GPUs of a reservation the pod takes there given back to it (r), when
// PreFilter found the pod may take one. Filter, Score and Reserve read it.
func reservedView(n *gpu.NodeGPUs, pod *v1.Pod, s *podState) (*gpu.NodeGPUs, *gpu.Reservation) {
	if !s.mayTakeReservation {
		return n, nil
	}
	r := n.ReservationFor(pod, &s.demand)
	if r == nil {
		return n, nil
	}
	return n.Without(&r.Assignment), r
}
