package gpu

import (
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ReservationIndex is where the nodes' AnnotationReservations are, kept by
// a front end from its node watch, so that it sends a pod that may take a
// reservation to the reserved nodes alone without reading every node. The
// ledger's views decide what a reservation holds and who takes it
// (NodeGPUs.ReservationFor); the index only narrows the nodes, to those
// whose reservation the ledger still holds (not taken by another pod of
// the owner: Ledger.HoldsReservation), and a node it names wrongly (its
// view not updated yet) just does not fit. The zero value is empty and
// ready; it is safe for concurrent use.
type ReservationIndex struct {
	mu     sync.RWMutex
	byNode map[string][]Reservation
	// nodes is len(byNode), read without the lock: most cycles find none.
	nodes atomic.Int64
}

// Set records the node's reservations (none when its annotation is absent
// or malformed: the ledger reports that with the node's view).
func (x *ReservationIndex) Set(node *v1.Node) {
	rs, _ := ReservationsOf(node)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byNode == nil {
		x.byNode = map[string][]Reservation{}
	}
	if len(rs) == 0 {
		delete(x.byNode, node.Name)
	} else {
		x.byNode[node.Name] = rs
	}
	x.nodes.Store(int64(len(x.byNode)))
}

// Remove forgets a node that is gone.
func (x *ReservationIndex) Remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byNode, name)
	x.nodes.Store(int64(len(x.byNode)))
}

// NodesFor is the nodes with a current reservation that pod (of demand d)
// may take and that holds says is still held; nil when there are none.
func (x *ReservationIndex) NodesFor(pod *v1.Pod, d *Demand, holds func(id string) bool) sets.Set[string] {
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

// ForPod is n with the GPUs of a reservation pod (of demand d) may take
// there, and that holds says is still held, given back to it, and that
// reservation; n itself and nil when it may take none. A front end that
// sent the pod to reserved nodes (ReservationIndex.NodesFor, with the same
// holds) fits, scores and places it on this view, there only.
func (n *NodeGPUs) ForPod(pod *v1.Pod, d *Demand, holds func(id string) bool) (*NodeGPUs, *Reservation) {
	for i := range n.Reserved {
		if r := &n.Reserved[i]; r.Reserves(pod, d) && holds(r.ID) {
			return n.Without(&r.Assignment), r
		}
	}
	return n, nil
}

// ReservationsCurrent reports whether every reservation n holds is still
// Current at now: a view kept past the first expiry holds GPUs no longer
// reserved.
func (n *NodeGPUs) ReservationsCurrent(now time.Time) bool {
	for i := range n.Reserved {
		if !n.Reserved[i].Current(now) {
			return false
		}
	}
	return true
}

// PlaceReserved chooses the GPUs of a pod that takes reservation taken on
// n (its view with taken's GPUs given back, ForPod): the reserved GPUs when
// they still suit it, else as the policy places it. taken nil is Place.
func (p *Policy) PlaceReserved(n *NodeGPUs, req *Request, taken *Reservation) (DeviceSet, Fit) {
	if taken != nil {
		onto := *req
		onto.Exclude = taken.Onto(req.Exclude)
		if chosen, fit := p.Place(n, &onto); fit.OK() {
			return chosen, fit
		}
	}
	return p.Place(n, req)
}
