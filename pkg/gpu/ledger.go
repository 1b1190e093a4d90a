package gpu

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Ledger is the allocation of every GPU on every node.
//
// A node's allocation is derived from the pods on the node, exactly as the
// caller's pod cache holds them (the scheduler's snapshot in plugin mode): a
// pod counts when it carries an assignment for the node, or, while it is in
// flight (reserved, not yet bound), when the ledger holds an assumption for it.
// A pod whose bind failed with its outcome unknown is held apart from the
// caller's pods until the outcome is known (Doubt).
// So a restarted scheduler rebuilds the exact state from the annotations of the
// bound pods, and the ledger never disagrees with the cache the scheduler
// filters against. Views are cached per node and recomputed only when the
// caller's generation for the node changes.
//
// Invariant: Assume never allocates a GPU beyond its capacity. Bound pods are
// facts and are always counted, even if their assignments conflict (two
// schedulers, a hand-edited annotation); such a GPU simply has nothing free.
//
// A Ledger is safe for concurrent use. Reading a node whose view is cached
// takes no lock (Filter and Score read every node of every cycle, in
// parallel); computing a view, assuming and forgetting take l.mu.
type Ledger struct {
	mu sync.Mutex
	// assumed holds the assignments of pods in flight, and assumedAt the
	// caller's generation of the node view each was made against. Guarded by mu.
	assumed   map[types.UID]Assignment
	assumedAt map[types.UID]int64
	// doubtful holds the assignments of pods whose bind failed in a way
	// that leaves unknown whether the API server bound them (see Doubt):
	// one per failed bind, since a pod retried after one may fail again
	// with other GPUs. Guarded by mu.
	doubtful map[types.UID][]Assignment
	// views maps a node name to its last computed *cachedView. Entries are
	// immutable and replaced under mu, through store (or deleted by
	// RemoveNode).
	views sync.Map
	// front holds current entries of views by the address of their Node
	// object (frontSlot), so that the read every Filter and Score makes per
	// node costs one atomic load instead of hashing the node's name: at
	// 5000 nodes the name lookups were a fifth of the scheduler's CPU spent
	// on GPU pods beyond plain ones. It is direct-mapped: a node whose slot
	// another node took is read from views. Written only by store and
	// RemoveNode, under mu; every entry in it is its node's current entry
	// in views. Nil until
	// views holds a second node, so that a ledger built for one node's view
	// allocates none.
	front atomic.Pointer[frontCache]
	// nodes is the number of names in views. Guarded by mu.
	nodes int
	// onConflicts, when set (ReportConflicts), hears of each node whose
	// conflicts changed, and reported the last ones it was told per node.
	// Guarded by mu.
	onConflicts func(node string, conflicts []string)
	reported    map[string]string
	// modelCounts counts the GPUs of the nodes in views by model, and
	// census is its last published form (GPUsByModel). modelCounts is
	// guarded by mu.
	modelCounts map[string]int64
	census      atomic.Pointer[ModelGPUs]
	// room sums the free milli-GPU of the views by model (RoomByModel).
	room RoomCount
	// removed maps the name of each node RemoveNode forgot to the UID of
	// its Node object: reads of that object (a front end's snapshot may
	// hold it a while longer) are answered without counting it again.
	// Guarded by mu.
	removed map[string]types.UID
	// taken maps the ID of each reservation a pod in flight or bound took
	// (AssumeReserved) to that pod: the reservation's GPUs count once, as
	// the pod's. Guarded by mu.
	taken map[string]taker
}

// taker is the pod that took a reservation, and the reservation's node.
type taker struct {
	uid  types.UID
	node string
}

// ReportConflicts makes the ledger call report whenever a node's view is
// computed with other conflicts (NodeGPUs.Conflicts) than the last ones
// reported for it: assignments naming a GPU by a UUID the node now has at
// another index, or no longer has. An empty list says the node's conflicts
// are gone. report is called with the ledger locked: it must not call the
// ledger. Set it before the ledger is used.
func (l *Ledger) ReportConflicts(report func(node string, conflicts []string)) {
	l.onConflicts = report
	l.reported = map[string]string{}
}

// ConflictsMessage is what the front ends log for a ReportConflicts call,
// with the node and the conflicts.
func ConflictsMessage(conflicts []string) string {
	if len(conflicts) == 0 {
		return "GPU assignments match the node's GPUs again"
	}
	return "GPU assignments name GPUs the node has elsewhere or no longer: those GPUs count where their UUID is, or nowhere"
}

// frontCache is Ledger.front's table: a few times the nodes of a large
// cluster, so that few share a slot (512 KiB; at 5000 nodes about 4% of the
// nodes lose their slot to another, against 14% with a quarter of the
// slots).
type frontCache [1 << frontBits]atomic.Pointer[cachedView]

const frontBits = 16

// frontSlot is the slot of a Node object in Ledger.front: its address,
// hashed. A cached view holds its Node object, so the address cannot be
// reused by another object while the entry is in a slot.
func frontSlot(node *v1.Node) int {
	return int((uint64(uintptr(unsafe.Pointer(node))) * 0x9e3779b97f4a7c15) >> (64 - frontBits))
}

// store makes c the node's current entry, in views and in front. The
// node's previous entry leaves its slot, so that front never holds an
// entry views has replaced. Callers hold l.mu.
func (l *Ledger) store(name string, c *cachedView) {
	prev := l.cached(name)
	var prevInv *Inventory
	if prev == nil {
		l.nodes++
	} else {
		prevInv = prev.inv
	}
	l.recount(prevInv, c.inv)
	c.room = l.countedView(c)
	var prevRoom *NodeGPUs
	if prev != nil {
		prevRoom = prev.room
	}
	l.room.Replace(prevRoom, c.room)
	front := l.front.Load()
	if front == nil && l.nodes > 1 {
		front = new(frontCache)
		l.front.Store(front)
	}
	if front != nil && prev != nil && prev.source != nil && prev.source != c.source {
		front[frontSlot(prev.source)].CompareAndSwap(prev, nil)
	}
	l.views.Store(name, c)
	if front != nil && c.source != nil {
		front[frontSlot(c.source)].Store(c)
	}
}

// cachedView is one node's view and what it was computed from. Immutable.
type cachedView struct {
	// source is the Node object the inventory was read from.
	source *v1.Node
	// generation is the caller's generation the view was computed at; stale
	// marks a view an assumption has changed since.
	generation int64
	stale      bool
	inv        *Inventory
	invErr     error
	view       *NodeGPUs
	// reservations are the node's AnnotationReservations, read with inv;
	// expires is when the first reservation the view holds expires (zero
	// when it holds none): the view is computed again after it.
	reservations    []Reservation
	reservationsErr error
	expires         time.Time
	// held is the UIDs of the assumed pods the view was computed from. Every
	// Assume and Forget on the node marks its view stale, so a view in use
	// was computed after the node's current assumptions were made.
	held []types.UID
	// room is what the ledger's room counts of the node (countedView). Set by
	// store.
	room *NodeGPUs
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{assumed: map[types.UID]Assignment{}, assumedAt: map[types.UID]int64{}, doubtful: map[types.UID][]Assignment{},
		taken: map[string]taker{}}
}

// Node returns node's GPUs and their allocation by pods.
//
// pods yields every pod the caller holds on the node, including pods assumed
// there and not yet bound (as the scheduler's cache does). generation must
// change whenever node or its pods change (as a scheduler NodeInfo's
// generation does); while it and the node object stay the same, the cached view
// is returned without reading pods. The inventory is read again only when node
// is a different object with a different resourceVersion.
func (l *Ledger) Node(node *v1.Node, generation int64, pods iter.Seq[*v1.Pod]) *NodeGPUs {
	if front := l.front.Load(); front != nil {
		if c := front[frontSlot(node)].Load(); c != nil && c.source == node && !c.stale && c.generation == generation && c.current() {
			return c.view
		}
	}
	if c := l.cached(node.Name); c != nil && !c.stale && c.generation == generation && sameNode(c.source, node) && c.current() {
		return c.view
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	next := &cachedView{source: node, generation: generation}
	if c := l.cached(node.Name); c != nil && sameNode(c.source, node) {
		next.inv, next.invErr = c.inv, c.invErr
		next.reservations, next.reservationsErr = c.reservations, c.reservationsErr
	} else {
		next.inv, next.invErr = InventoryFromNode(node)
		next.reservations, next.reservationsErr = ReservationsOf(node)
	}
	next.view, next.held = l.compute(node.Name, next.inv, next.invErr, pods, next.reservations, time.Now())
	next.view.ReservationsErr = next.reservationsErr
	for _, r := range next.view.Reserved {
		if next.expires.IsZero() || r.Expires.Before(next.expires) {
			next.expires = r.Expires
		}
	}
	if uid, gone := l.removed[node.Name]; gone && uid == node.UID {
		return next.view // removed: read, not counted again
	}
	delete(l.removed, node.Name) // a new Node object of the name
	l.store(node.Name, next)
	if l.onConflicts != nil {
		if key := strings.Join(next.view.Conflicts, "\n"); key != l.reported[node.Name] {
			l.reported[node.Name] = key
			l.onConflicts(node.Name, next.view.Conflicts)
		}
	}
	return next.view
}

// NodeInFlight is Node, plus the assumptions on the node of pods that pods
// does not hold yet, made against a view of this generation or a later one.
// A scheduler reserves with it: the upstream Workload API's pod-group cycle
// reserves every pod of a gang against one snapshot, which holds none of
// them, and without these the gang's pods would be given the same GPUs.
// Once the caller's generation for the node has moved past an assumption,
// its cache has taken the pod in, or dropped it: the assumption counts only
// if the cache holds the pod. Filter and Score read Node, whose snapshot
// always holds the pods assumed before the cycle.
func (l *Ledger) NodeInFlight(node *v1.Node, generation int64, pods iter.Seq[*v1.Pod]) *NodeGPUs {
	view := l.Node(node, generation, pods)
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cached(node.Name)
	if c == nil || c.view != view {
		return view // replaced meanwhile; the next read sees it
	}
	return l.withUnheld(c)
}

// withUnheld returns c's view with the assumptions on its node of pods it
// was not computed from, or the view itself when there are none. Callers
// hold l.mu.
func (l *Ledger) withUnheld(c *cachedView) *NodeGPUs {
	return l.withAssumed(c, func(uid types.UID) bool { return l.assumedAt[uid] >= c.generation })
}

// withAssumed returns c's view with the assumptions on its node of pods
// it was not computed from that counts says count, or the view itself
// when there are none. Callers hold l.mu.
func (l *Ledger) withAssumed(c *cachedView, counts func(types.UID) bool) *NodeGPUs {
	if c.inv == nil || len(l.assumed) == 0 {
		return c.view
	}
	var out *NodeGPUs
	for uid, a := range l.assumed {
		if a.Node != c.view.Name || slices.Contains(c.held, uid) || !counts(uid) {
			continue
		}
		if out == nil {
			out = c.view.clone()
		}
		out.add(&a)
	}
	if out == nil {
		return c.view
	}
	out.summarize()
	return out
}

// cached returns the node's cached view, or nil.
func (l *Ledger) cached(name string) *cachedView {
	if v, ok := l.views.Load(name); ok {
		return v.(*cachedView)
	}
	return nil
}

// current reports whether no reservation the view holds has expired. Only
// a view holding reservations reads the clock.
func (c *cachedView) current() bool {
	return c.expires.IsZero() || time.Now().Before(c.expires)
}

func sameNode(seen, node *v1.Node) bool {
	if seen == nil {
		return false
	}
	return seen == node || (node.ResourceVersion != "" && seen.ResourceVersion == node.ResourceVersion)
}

// compute derives a node's view from its pods. Callers hold l.mu.
//
// Pods with an assignment or an assumption count on the GPUs they name. A pod
// with a GPU demand and neither — one nominated to the node by preemption, or
// one bound by another scheduler — still needs GPUs there: it is counted on
// the GPUs best-fit would give it, so that its claim is held.
func (l *Ledger) compute(name string, inv *Inventory, invErr error, pods iter.Seq[*v1.Pod], rs []Reservation, now time.Time) (*NodeGPUs, []types.UID) {
	n := newNodeGPUs(name, inv, invErr)
	if inv == nil {
		return n, nil
	}
	var unplaced []*v1.Pod
	var held, onNode []types.UID
	for pod := range pods {
		if _, ok := l.assumed[pod.UID]; ok {
			held = append(held, pod.UID)
		}
		if isTerminated(pod) {
			continue
		}
		a, counted := AssignmentOf(pod)
		if counted && a.Node == name {
			if old, ok := l.assumed[pod.UID]; ok && old.Node != name {
				defer l.refreshRoom(old.Node) // its room no longer counts the pod
			}
			l.done(pod.UID) // bound with its annotation: the assumption is done
			l.endDoubts(pod.UID)
		} else if a, counted = l.assumed[pod.UID]; !counted || a.Node != name {
			unplaced = append(unplaced, pod)
			continue
		}
		n.add(&a)
		if len(rs) > 0 {
			onNode = append(onNode, pod.UID)
		}
	}
	l.forgetTaken(name, rs)
	holdReservations(n, rs, now, func(id string) (types.UID, bool) { t, ok := l.taken[id]; return t.uid, ok }, onNode)
	for _, doubts := range l.doubtful {
		for _, a := range doubts {
			if a.Node == name {
				n.add(&a) // perhaps bound: held until the outcome is known
			}
		}
	}
	n.summarize()
	for _, pod := range unplaced {
		if d, err := DemandFromPod(pod); err == nil && !d.IsZero() {
			if a, ok := PlaceClaim(n, &d); ok {
				n.add(&a)
				n.summarize() // the next unplaced pod must see this one
			}
		}
	}
	return n, held
}

// claimPolicy places the demands whose GPUs are not known (PlaceClaim).
var claimPolicy = MustPolicy(PolicyBestFit, PolicyConfig{})

// PlaceClaim is the assignment the engine counts for a demand on n when it
// does not know which GPUs the demand holds or will hold: those best fit
// would give it. The ledger counts pods bound without an assignment this
// way, and a what-if of a placement that need not match any policy's (a
// gang fitted onto empty nodes) places its demands this way. ok is false
// when d does not fit n.
func PlaceClaim(n *NodeGPUs, d *Demand) (a Assignment, ok bool) {
	req := Request{Demand: d}
	chosen, fit := claimPolicy.Place(n, &req)
	if !fit.OK() || d.IsZero() {
		return Assignment{}, false
	}
	return NewAssignment(n, d, chosen), true
}

// AssignmentOf returns the assignment a pod holds as a bound pod: one read from
// its annotation, for the node it is bound to, while it is not terminated.
func AssignmentOf(pod *v1.Pod) (Assignment, bool) {
	raw, ok := pod.Annotations[AnnotationAssigned]
	if !ok || pod.Spec.NodeName == "" || isTerminated(pod) {
		return Assignment{}, false
	}
	a, err := ParseAssignment(raw)
	if err != nil || a.Node != pod.Spec.NodeName {
		return Assignment{}, false
	}
	return a, true
}

// isTerminated: a terminated pod's containers are gone, and so is its claim on GPUs.
func isTerminated(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// Assume allocates a's GPUs to the pod with the given UID before it is bound.
// The caller must have read the node with Node or NodeInFlight in this
// cycle, and must then hold the pod on the node (with a new generation) for
// the assumption to count in Node; NodeInFlight counts it at once. Assume
// fails, changing nothing, if the node is unknown, if another assumption
// changed the node since it was last read, or if any GPU lacks the free
// milli-GPU or memory in the view Node returned, or if the pod is assumed
// already (Forget it first).
func (l *Ledger) Assume(uid types.UID, a Assignment) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.assumeLocked(uid, a, nil)
}

// assumeLocked is Assume, checking a's GPUs against free when it is not
// nil (else the node's view). Callers hold l.mu.
func (l *Ledger) assumeLocked(uid types.UID, a Assignment, free *NodeGPUs) error {
	c := l.cached(a.Node)
	switch {
	case c == nil || c.inv == nil:
		return fmt.Errorf("node %s has no known GPU inventory", a.Node)
	case c.stale:
		return fmt.Errorf("node %s changed since it was last read; read it again", a.Node)
	}
	if old, ok := l.assumed[uid]; ok {
		return fmt.Errorf("pod %s is already assumed on GPUs %v of node %s", uid, old.Devices, old.Node)
	}
	if free == nil {
		free = c.view
	}
	if err := checkFree(free, &a); err != nil {
		return err
	}
	l.assumed[uid] = a
	l.assumedAt[uid] = c.generation
	l.markStale(a.Node)
	return nil
}

// Forget releases the GPUs assumed for a pod; it does nothing for a pod that is
// not assumed, nor for one in doubt (Settle releases those). A bound pod's
// GPUs are released when it leaves its node's pods.
func (l *Ledger) Forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.assumed[uid]; ok {
		l.done(uid)
		l.markStale(a.Node)
	}
	for id, t := range l.taken {
		if t.uid == uid {
			delete(l.taken, id) // the reservation holds its GPUs again
			l.markStale(t.node)
		}
	}
}

// AssumeReserved is Assume for a pod that takes reservation id of a's node
// (Reservation.Reserves): a's GPUs must be free once the reservation's are
// given back, and from then on the reservation counts as the pod's, not
// beside it, while the pod is assumed or bound on the node. Forget gives it
// back to the reservation.
func (l *Ledger) AssumeReserved(uid types.UID, a Assignment, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cached(a.Node)
	if c == nil || c.inv == nil || c.stale {
		return l.assumeLocked(uid, a, nil)
	}
	i := slices.IndexFunc(c.view.Reserved, func(r Reservation) bool { return r.ID == id })
	if i < 0 {
		return fmt.Errorf("node %s holds no reservation %s", a.Node, id)
	}
	free := c.view.Without(&c.view.Reserved[i].Assignment)
	// Taken first, so that the room the assumption's store counts
	// (countedView) knows the pod's GPUs are the reservation's.
	l.taken[id] = taker{uid: uid, node: a.Node}
	if err := l.assumeLocked(uid, a, free); err != nil {
		delete(l.taken, id)
		return err
	}
	return nil
}

// HoldsReservation reports whether reservation id is still free to take:
// no pod assumed or bound since took it (AssumeReserved). It does not read
// the node's view, which may be older than the reservation.
func (l *Ledger) HoldsReservation(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, taken := l.taken[id]
	return !taken
}

// forgetTaken drops the takers of reservations of node that rs, the node's
// reservations now, no longer has. Callers hold l.mu.
func (l *Ledger) forgetTaken(node string, rs []Reservation) {
	for id, t := range l.taken {
		if t.node == node && !slices.ContainsFunc(rs, func(r Reservation) bool { return r.ID == id }) {
			delete(l.taken, id)
		}
	}
}

// Doubt keeps the GPUs assumed for a pod whose bind failed without saying
// whether the API server bound it (a connection cut mid-request: the
// binding may have been written, its answer lost). Until Settle, or until
// the pod shows up among its node's pods with an assignment (then that
// counts, and every doubt of the pod ends), the assignment counts on its
// node whatever the caller's pods say, and a Forget of the pod leaves it
// held. A pod may be in doubt with several assignments, one per failed
// bind. Doubt does nothing for a pod that is not assumed.
func (l *Ledger) Doubt(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.assumed[uid]; ok {
		l.doubtful[uid] = append(l.doubtful[uid], a)
		l.done(uid)
		l.markStale(a.Node)
	}
}

// Settle releases what Doubt held for a pod with assignment a: the caller
// learnt that the pod is not bound with it (it is unbound, bound otherwise,
// or gone). It does nothing for an assignment not in doubt.
func (l *Ledger) Settle(uid types.UID, a Assignment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	doubts := l.doubtful[uid]
	if i := slices.IndexFunc(doubts, func(d Assignment) bool { return d.String() == a.String() }); i >= 0 {
		l.setDoubts(uid, slices.Delete(slices.Clone(doubts), i, i+1))
		l.markStale(a.Node)
	}
}

// SettleAll releases everything Doubt held for a pod: the pod is gone.
func (l *Ledger) SettleAll(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endDoubts(uid)
}

// Doubtful returns the assignments Doubt holds for a pod.
func (l *Ledger) Doubtful(uid types.UID) []Assignment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.doubtful[uid])
}

// endDoubts ends every doubt of a pod seen bound with its assignment; the
// other nodes its doubts named are read again. Callers hold l.mu.
func (l *Ledger) endDoubts(uid types.UID) {
	for _, a := range l.doubtful[uid] {
		l.markStale(a.Node)
	}
	delete(l.doubtful, uid)
}

// setDoubts replaces a pod's doubts. Callers hold l.mu.
func (l *Ledger) setDoubts(uid types.UID, doubts []Assignment) {
	if len(doubts) == 0 {
		delete(l.doubtful, uid)
		return
	}
	l.doubtful[uid] = doubts
}

// Assumed returns the assignment assumed for a pod in flight, if any.
func (l *Ledger) Assumed(uid types.UID) (Assignment, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.assumed[uid]
	return a, ok
}

// done ends the assumption of a pod. Callers hold l.mu.
func (l *Ledger) done(uid types.UID) {
	delete(l.assumed, uid)
	delete(l.assumedAt, uid)
}

// markStale forces the node's next read to recompute, and counts the
// node's assumptions in the room at once. Callers hold l.mu.
func (l *Ledger) markStale(node string) {
	if c := l.cached(node); c != nil {
		stale := *c
		stale.stale = true
		l.store(node, &stale)
	}
}

// checkFree reports whether every GPU of a exists on the node and has room for it.
func checkFree(n *NodeGPUs, a *Assignment) error {
	for _, index := range a.Devices {
		i := n.Inventory.position(index)
		switch {
		case i < 0:
			return fmt.Errorf("node %s has no GPU %d", n.Name, index)
		case n.FreeMilli(i) < a.Milli:
			return fmt.Errorf("GPU %d on node %s has %d milli-GPU free, %d needed", index, n.Name, n.FreeMilli(i), a.Milli)
		case a.Milli < MilliPerGPU && n.FreeMemoryMiB(i) < a.MemoryMiB:
			return fmt.Errorf("GPU %d on node %s has %d MiB free, %d needed", index, n.Name, n.FreeMemoryMiB(i), a.MemoryMiB)
		}
	}
	return nil
}
