package gpu

import "k8s.io/apimachinery/pkg/types"

// RoomByModel implements FleetRoom: the free room of the views the ledger
// holds (countedView: a pod counts from the moment it is assumed), of the
// nodes it has read and not removed (RemoveNode).
func (l *Ledger) RoomByModel() *FreeRoom { return l.room.RoomByModel() }

// RemoveNode forgets a node deleted from the cluster: its GPUs leave the
// census (GPUsByModel) and its free room the room (RoomByModel), which an
// idle node removed by an autoscaler would otherwise inflate for good. A
// node read again later counts again.
func (l *Ledger) RemoveNode(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cached(name)
	if c == nil {
		return
	}
	l.recount(c.inv, nil)
	l.room.Replace(c.room, nil)
	if front := l.front.Load(); front != nil && c.source != nil {
		front[frontSlot(c.source)].CompareAndSwap(c, nil)
	}
	l.views.Delete(name)
	l.nodes--
	delete(l.reported, name)
	if l.removed == nil {
		l.removed = map[string]types.UID{}
	}
	if c.source != nil {
		l.removed[name] = c.source.UID
	}
}

// RoomView is the node's view as the ledger's room counts it (its view
// with the pods assumed there); nil for a node the ledger has not read.
func (l *Ledger) RoomView(node string) *NodeGPUs {
	if c := l.cached(node); c != nil {
		return c.room
	}
	return nil
}

// countedView is the node's view as the ledger's room counts it: with every
// assumption on the node that the view was not computed from, so that a
// pod counts from the moment it is assumed, whether or not the front end
// reads the node again before its next pod (kube-scheduler filters a node
// out before GPUPlacement reads it when another plugin rejects it). A pod
// that takes a reservation (AssumeReserved) adds nothing: the view counts
// the reservation's GPUs as used already. Until the node is read again, an
// assumption the view was computed from keeps counting after Forget, and a
// pod in doubt (Doubt) does not count. Callers hold l.mu.
func (l *Ledger) countedView(c *cachedView) *NodeGPUs {
	return l.withAssumed(c, func(uid types.UID) bool { return !l.takesReservation(uid) })
}

// refreshRoom counts the node's room again (countedView) after an assumption
// on it ended elsewhere than through Assume or Forget, keeping its view
// (and whether it is stale) as it is. Callers hold l.mu.
func (l *Ledger) refreshRoom(node string) {
	if c := l.cached(node); c != nil {
		same := *c
		l.store(node, &same)
	}
}

// takesReservation reports whether the pod took a reservation
// (AssumeReserved). Callers hold l.mu.
func (l *Ledger) takesReservation(uid types.UID) bool {
	for _, t := range l.taken {
		if t.uid == uid {
			return true
		}
	}
	return false
}
