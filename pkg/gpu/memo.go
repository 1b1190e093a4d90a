package gpu

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// PlaceAndScore is Place followed, when the demand fits, by Score of the
// chosen GPUs: what a front end's score step asks of every feasible node.
// score is 0 when the demand does not fit.
//
// For a policy that measures fragmentation (PolicyInfo.NeedsShapes), whose
// answers cost a fragment measurement per GPU and typical pod, the answer
// is remembered with the node's view (see viewMemo) and given again while
// the node keeps that view: a scheduler asks about every node for every
// pod, and between two pods only the nodes a pod came to or left change. A
// request that excludes GPUs is always answered afresh, since what it
// excludes may change while the view stays.
func (p *Policy) PlaceAndScore(n *NodeGPUs, req *Request) (chosen DeviceSet, fit Fit, score int64) {
	if !p.info.NeedsShapes || req.Exclude != nil || req.Demand == nil || n.memo == nil {
		return p.placeAndScore(n, req)
	}
	id, ok := p.demands.id(req.Demand)
	if !ok {
		return p.placeAndScore(n, req)
	}
	typical, census := p.shapes.Typical(), p.census()
	prices, pressed := p.pricesNow(n, typical)
	key := memoKey{typical, census}
	priced := pricedBy{prices, pressed}
	if r, ok := n.memo.get(p, id, req.Host, key, priced); ok {
		return r.chosen, r.fit, r.score
	}
	chosen, fit, score = p.placeAndScore(n, req)
	// The fleet's room may have moved the pressure while Choose and Score
	// read the prices: the answer is then not remembered under either.
	if again, pressedAgain := p.pricesNow(n, typical); again == prices && pressedAgain == pressed {
		n.memo.put(p, id, req.Host, key, priced, memoResult{chosen, fit, score})
	}
	return chosen, fit, score
}

func (p *Policy) placeAndScore(n *NodeGPUs, req *Request) (DeviceSet, Fit, int64) {
	chosen, fit := p.Place(n, req)
	if !fit.OK() {
		return chosen, fit, 0
	}
	return chosen, fit, p.Score(n, req, chosen)
}

// viewMemo remembers policies' answers (Policy.PlaceAndScore) about one
// view of a node, by policy and demand. A view is immutable, and a
// strategy's Choose and Score are functions of the view, the demand, the
// host, what memoKey holds and its own pricedBy alone, so an answer holds
// for as long as the view lives, asked with the same host, key and prices;
// answers measured against other typical pods (a ShapeWindow recomputes
// them), another census (Fleet) or other prices are dropped. Safe for
// concurrent use.
type viewMemo struct {
	mu  sync.Mutex
	key memoKey
	// byPolicy holds each policy's answers, oldest first, at most
	// maxMemoPolicies. A scheduler asks with one policy; the simulator's
	// environment and the plugin's score features ask with a few more.
	// Policies measuring against other typical pods or another census drop
	// each other's answers (typical and census are the view's); a policy
	// whose prices changed drops only its own.
	byPolicy []policyMemo
}

// policyMemo is one policy's answers about a view, and the prices they
// were measured with.
type policyMemo struct {
	policy  *Policy
	priced  pricedBy
	answers memoTable
}

// pricedBy is what a priced strategy's answers on a node were measured
// with beyond memoKey: its LP prices and the classes of the node's GPUs
// whose pressure was charged (Policy.pricesNow; nil and 0 for others),
// which follow the fleet's free room.
type pricedBy struct {
	prices  *sharePrices
	pressed uint64
}

// memoResult is one remembered answer. Answers to requests that exclude
// GPUs are never remembered, so a remembered Fit has no Excluded text, and
// the slot that keeps it (memoSlot) holds no pointer: a table of them
// costs the garbage collector nothing to scan.
type memoResult struct {
	chosen DeviceSet
	fit    Fit
	score  int64
}

// memoSlot is a slot of a memoTable: one demand's answer and the host it
// was asked with. id is the demand's ID plus one, 0 for an empty slot.
type memoSlot struct {
	id      uint32
	reasons Reasons
	chosen  DeviceSet
	free    DeviceSet
	score   int64
	host    Host
}

// memoTable maps demand IDs to answers with open addressing in one flat
// array of slots, so that a look-up, which a scheduler makes for every
// node and pod, usually reads one slot: the answer is in the slot the
// demand hashes to. (A Go map would read its header, a group's control
// word and the slot, each a cache miss on a node not asked about lately.)
// It grows to keep at most three slots in four used.
type memoTable struct {
	slots []memoSlot
	used  int
	shift uint8 // 32 − log2(len(slots)): a hash's top bits pick the slot
}

// slot is where id's answer is, or the empty slot where it would go; the
// table must have room (len(slots) > used).
func (t *memoTable) slot(id demandID) *memoSlot {
	mask := uint32(len(t.slots) - 1)
	// Fibonacci hashing spreads the consecutive IDs a policy interns.
	for i := (uint32(id) * 0x9E3779B1) >> t.shift; ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.id == uint32(id)+1 || s.id == 0 {
			return s
		}
	}
}

func (t *memoTable) get(id demandID, h Host) (memoResult, bool) {
	if t.used == 0 {
		return memoResult{}, false
	}
	s := t.slot(id)
	if s.id == 0 || s.host != h {
		return memoResult{}, false
	}
	return memoResult{chosen: s.chosen, fit: Fit{Free: s.free, Reasons: s.reasons}, score: s.score}, true
}

func (t *memoTable) put(id demandID, h Host, r memoResult) {
	if len(t.slots) == 0 {
		t.grow()
	}
	s := t.slot(id)
	if s.id == 0 {
		// A new answer; one that replaces another never grows the table.
		if (t.used+1)*4 > len(t.slots)*3 {
			t.grow()
			s = t.slot(id)
		}
		t.used++
	}
	*s = memoSlot{id: uint32(id) + 1, reasons: r.fit.Reasons, chosen: r.chosen, free: r.fit.Free, score: r.score, host: h}
}

func (t *memoTable) grow() {
	old := t.slots
	t.slots = make([]memoSlot, max(8, 2*len(old)))
	t.shift = uint8(32 - bits.TrailingZeros(uint(len(t.slots))))
	for i := range old {
		if old[i].id != 0 {
			*t.slot(demandID(old[i].id - 1)) = old[i]
		}
	}
}

func (t *memoTable) clear() {
	clear(t.slots)
	t.used = 0
}

// memoKey is what every answer of a view's memo was measured against: the
// typical pods and the fleet's GPUs by model. Their backing arrays, held by
// a memo, cannot be reused while it holds them.
type memoKey struct {
	typical []TypicalPod
	census  ModelGPUs
}

// same reports whether k and o hold the same slices, not merely equal ones.
func (k memoKey) same(o memoKey) bool {
	return sameTypical(k.typical, o.typical) && sameCensus(k.census, o.census)
}

func (m *viewMemo) get(p *Policy, id demandID, h Host, key memoKey, priced pricedBy) (memoResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.key.same(key) {
		return memoResult{}, false
	}
	for i := range m.byPolicy {
		if pm := &m.byPolicy[i]; pm.policy == p {
			if pm.priced != priced {
				return memoResult{}, false
			}
			return pm.answers.get(id, h)
		}
	}
	return memoResult{}, false
}

func (m *viewMemo) put(p *Policy, id demandID, h Host, key memoKey, priced pricedBy, r memoResult) {
	if r.fit.Excluded != "" {
		return // not an answer PlaceAndScore remembers; see memoResult
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.key.same(key) {
		clear(m.byPolicy)
		m.key, m.byPolicy = key, m.byPolicy[:0]
	}
	for i := range m.byPolicy {
		if pm := &m.byPolicy[i]; pm.policy == p {
			if pm.priced != priced {
				pm.priced = priced
				pm.answers.clear()
			}
			pm.answers.put(id, h, r)
			return
		}
	}
	if len(m.byPolicy) == maxMemoPolicies {
		// The oldest policy's answers give way.
		copy(m.byPolicy, m.byPolicy[1:])
		m.byPolicy[len(m.byPolicy)-1] = policyMemo{}
		m.byPolicy = m.byPolicy[:len(m.byPolicy)-1]
	}
	m.byPolicy = append(m.byPolicy, policyMemo{policy: p, priced: priced})
	m.byPolicy[len(m.byPolicy)-1].answers.put(id, h, r)
}

// maxMemoPolicies bounds the policies whose answers a view keeps, so that
// policies built again and again (each a new *Policy) cannot grow a
// long-lived view's memo.
const maxMemoPolicies = 8

// sameTypical reports whether a and b are the same slice, not merely equal
// ones.
func sameTypical(a, b []TypicalPod) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// sameCensus reports whether a and b are the same census (Fleet), not
// merely equal ones.
func sameCensus(a, b ModelGPUs) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// demandID is a demand interned by a policy's demandIDs: demands with the
// same ID are placed alike.
type demandID uint32

// demandIDs interns demands, so that a view's memo is indexed by a small
// number instead of by the demand. A front end asks about one demand for
// many nodes in a row, so the last demand interned is kept aside and
// recognized without a map look-up. Safe for concurrent use.
type demandIDs struct {
	last atomic.Pointer[internedDemand]
	mu   sync.Mutex
	ids  map[internKey]demandID
}

// maxDemandIDs bounds the demands a policy interns; demands beyond it are
// not remembered (PlaceAndScore answers them afresh).
const maxDemandIDs = 1 << 16

// internKey identifies a demand as far as a strategy reads it: its
// DemandKey, with the raw milli-GPU, which the key leaves out of a demand
// without GPUs.
type internKey struct {
	key   DemandKey
	milli int64
}

type internedDemand struct {
	d  Demand // a copy, models cloned
	id demandID
}

// id is d's ID; ok is false when no more demands can be interned.
func (ds *demandIDs) id(d *Demand) (demandID, bool) {
	if last := ds.last.Load(); last != nil && sameDemand(&last.d, d) {
		return last.id, true
	}
	k := internKey{d.Key(), d.Milli}
	ds.mu.Lock()
	id, ok := ds.ids[k]
	if !ok {
		if len(ds.ids) >= maxDemandIDs {
			ds.mu.Unlock()
			return 0, false
		}
		if ds.ids == nil {
			ds.ids = map[internKey]demandID{}
		}
		id = demandID(len(ds.ids))
		ds.ids[k] = id
	}
	ds.mu.Unlock()
	c := *d
	c.Models = slices.Clone(d.Models)
	ds.last.Store(&internedDemand{d: c, id: id})
	return id, true
}

// sameDemand reports whether a and b are equal field by field, models in
// the same order.
func sameDemand(a, b *Demand) bool {
	return a.Count == b.Count && a.Milli == b.Milli && a.MemoryMiB == b.MemoryMiB &&
		a.MilliCPU == b.MilliCPU && a.HostMemoryMiB == b.HostMemoryMiB && slices.Equal(a.Models, b.Models)
}
