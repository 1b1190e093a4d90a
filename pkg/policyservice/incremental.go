package policyservice

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// The client's side of incremental requests (ScoreRequest.base,
// docs/policy-service.md#incremental-requests). The service keeps a table
// of the nodes sent, by slot; between two pods all but a few nodes look
// the same to it, so a request sends only the nodes whose Node message or
// feature row differs from the table's and names the rest by slot. The
// session mirrors the service's table as of the last request answered
// with kept; any other answer (an error, a timeout, a reply without kept)
// forgets it, so that the next request is whole, and a service that keeps
// no table only ever gets whole requests. One request of a session is in
// flight at a time: a call made meanwhile (the extender's are concurrent)
// is sent whole, without the session.

// session is one Scorer's series of requests and its mirror of the
// service's table.
type session struct {
	id string

	mu   sync.Mutex
	next uint64
	// version is the sequence the service's table is as of; 0 when it is
	// not known (none yet, or the last answer did not keep one).
	version uint64
	// inFlight: a request of the session awaits its answer.
	inFlight bool
	// tables index the GPU models and groups of every Node message in the
	// table; they grow until a whole request starts them again.
	tables *Tables
	// slots is each node's slot by name; table holds what the service
	// keeps at each slot.
	slots map[string]int32
	table []tableEntry
	// spare is the memory of the session's tracked request, used again by
	// the next one: one is in flight at a time, and its answer is the last
	// that reads it.
	spare outgoing
}

// tableEntry is a slot's node as the service holds it. gpus is the
// entry's own copy, so that the table does not keep the callers' arrays
// alive.
type tableEntry struct {
	// demand is the pod shape the entry's row was made for: the row is a
	// function of the features and the demand (gpu.NodeFeatures.AppendRow).
	demand gpu.DemandKey
	f      gpu.NodeFeatures
	gpus   []gpu.GPUFeatures
}

func newSession() *session {
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return &session{id: hex.EncodeToString(id[:]), slots: map[string]int32{}, tables: &Tables{}}
}

// outgoing is one request ready to send.
type outgoing struct {
	req *pb.ScoreRequest
	// order maps the request's whole node list to the caller's: position
	// i of the list is nodes[order[i]].
	order []int
	// tracked: the request has the session (the table follows its answer).
	tracked bool
	// sentSlots are the slots of the nodes sent (order[:len]); reset:
	// the request replaces the table (a whole request with the session).
	sentSlots []int32
	reset     bool
	tables    *Tables
	// nodes and demand are what the request was built from; demandKey
	// is the demand's key.
	nodes     []gpu.NodeFeatures
	demand    *gpu.Demand
	demandKey gpu.DemandKey
	// row is fill's memory for one node's row.
	row []float32
	// reused and builtinScores are the request's slots of reused nodes and
	// their builtin scores; reusedFrom their places in nodes. names is the
	// whole list's names (wholeNames).
	reused        []int32
	builtinScores []float64
	reusedFrom    []int
	names         []string
}

// request builds the request for a pod over nodes: incremental when the
// service keeps the session's table and some node is unchanged in it;
// whole with the session when the table is not known or grew too large;
// whole without the session while another request is in flight.
func (s *session) request(pod *v1.Pod, d *gpu.Demand, nodes []gpu.NodeFeatures, fallback gpu.PolicyType) *outgoing {
	columns := gpu.FeatureColumns()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	req := &pb.ScoreRequest{Pod: PodMessage(pod, d), FallbackPolicy: string(fallback), Sequence: s.next}
	if s.inFlight {
		out := &outgoing{order: make([]int, 0, len(nodes)), nodes: nodes, demand: d}
		for i := range nodes {
			out.order = append(out.order, i)
		}
		out.tables = &Tables{}
		s.fill(req, out, len(nodes), columns)
		return out
	}
	// The session's one tracked request at a time builds in the session's
	// buffers (spare): nothing reads them once the session has its answer.
	s.inFlight = true
	out := &s.spare
	*out = outgoing{order: out.order[:0], nodes: nodes, demand: d, demandKey: d.Key(), row: out.row[:0],
		tracked: true, sentSlots: out.sentSlots[:0],
		reused: out.reused[:0], builtinScores: out.builtinScores[:0], reusedFrom: out.reusedFrom[:0], names: out.names[:0]}
	req.Session = s.id
	if s.version == 0 || s.tooLarge(len(nodes)) || slices.IndexFunc(nodes, nonFiniteBuiltin) >= 0 {
		s.whole(req, out, columns)
		return out
	}
	// Reuse a node whose slot holds the same node, but for the builtin
	// score, for the same pod shape: its row is then the same but for the
	// builtin score, which builtin_scores carries and the service writes
	// into the row; so only where the row holds that score.
	next := int32(len(s.table))
	for i := range nodes {
		slot, ok := s.slots[nodes[i].Name]
		if ok && s.table[slot].demand == out.demandKey && rowHoldsBuiltin(&nodes[i]) && sameNode(&s.table[slot].f, &nodes[i]) {
			out.reused = append(out.reused, slot)
			out.builtinScores = append(out.builtinScores, nodes[i].BuiltinScore)
			out.reusedFrom = append(out.reusedFrom, i)
			continue
		}
		if !ok {
			slot, next = next, next+1
		}
		out.order = append(out.order, i)
		out.sentSlots = append(out.sentSlots, slot)
	}
	// The reused nodes follow the sent ones in the request's whole list,
	// in the caller's order.
	sent := len(out.order)
	out.order = append(out.order, out.reusedFrom...)
	req.Base, req.Slots, req.Reused, req.BuiltinScores, out.tables = s.version, out.sentSlots, out.reused, out.builtinScores, s.tables
	s.fill(req, out, sent, columns)
	return out
}

// whole makes req a whole request with the session: every node sent, at
// slots 0..n-1 in the caller's order, replacing the table.
func (s *session) whole(req *pb.ScoreRequest, out *outgoing, columns []string) {
	out.order, out.sentSlots = out.order[:0], slices.Grow(out.sentSlots[:0], len(out.nodes))[:len(out.nodes)]
	for i := range out.nodes {
		out.order = append(out.order, i)
		out.sentSlots[i] = int32(i)
	}
	req.Base, req.Reused, req.BuiltinScores, req.Slots = 0, nil, nil, out.sentSlots
	out.reset, out.tables = true, &Tables{}
	s.fill(req, out, len(out.nodes), columns)
}

// fill writes the first sent nodes of out.order into req, with their rows
// and the tables.
func (s *session) fill(req *pb.ScoreRequest, out *outgoing, sent int, columns []string) {
	req.Nodes = make([]*pb.Node, sent)
	buf := make([]byte, 0, 4*len(columns)*sent)
	for k, i := range out.order[:sent] {
		req.Nodes[k] = NodeMessage(&out.nodes[i], out.tables)
		out.row = out.nodes[i].AppendRow(out.row[:0], out.demand)
		buf = appendRow(buf, out.row)
	}
	req.Features = &pb.FeatureMatrix{Columns: columns, Rows: int32(sent), Values: buf}
	req.Models, req.Groups = slices.Clip(out.tables.Models), slices.Clip(out.tables.Groups)
	out.req = req
}

// resend is out's request again whole, with the session, for a service
// that no longer holds the table.
func (s *session) resend(out *outgoing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	req := &pb.ScoreRequest{Pod: out.req.Pod, FallbackPolicy: out.req.FallbackPolicy, Session: s.id, Sequence: s.next}
	s.whole(req, out, out.req.Features.Columns)
}

// answered records the answer to out: kept makes the table as of out's
// request; anything else forgets it.
func (s *session) answered(out *outgoing, kept bool) {
	if !out.tracked {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight = false
	if !kept {
		s.version = 0
		return
	}
	if out.reset {
		clear(s.slots)
		s.table = s.table[:0]
	}
	for k, i := range out.order[:len(out.sentSlots)] {
		slot := out.sentSlots[k]
		if int(slot) >= len(s.table) {
			s.table = slices.Grow(s.table, int(slot)+1-len(s.table))[:slot+1]
		}
		e := &s.table[slot]
		e.demand, e.f = out.demandKey, out.nodes[i]
		e.gpus = append(e.gpus[:0], out.nodes[i].GPUs...)
		e.f.GPUs = e.gpus
		s.slots[out.nodes[i].Name] = slot
	}
	s.version, s.tables = out.req.Sequence, out.tables
}

// tooLarge reports whether the table or its tables have grown past what a
// cluster's nodes need (nodes gone, models or groups no longer seen), so
// that a whole request should start them again. A request covers only the
// window of nodes the scheduler scores, which moves from cycle to cycle,
// so the bound is not the request's size but maxTable, or twice the
// request's nodes when that is more.
func (s *session) tooLarge(n int) bool {
	limit := max(maxTable, 2*n)
	return len(s.table) > limit || len(s.tables.Models)+len(s.tables.Groups) > limit
}

// maxTable is the most nodes a session's table holds before it starts
// again: 65,536 nodes, about 40 MB of features at 8 GPUs a node.
const maxTable = 1 << 16

func nonFiniteBuiltin(f gpu.NodeFeatures) bool {
	return math.IsNaN(f.BuiltinScore) || math.IsInf(f.BuiltinScore, 0)
}

// sameNode reports whether two nodes' features give the same Node
// message but for its builtin score, which an incremental request carries
// for every reused node (ScoreRequest.builtin_scores): the rescaling over
// the request's nodes changes it on all of them whenever the best or worst
// node's score changes, as it does after nearly every pod under a packing
// policy.
func sameNode(a, b *gpu.NodeFeatures) bool {
	return a.Name == b.Name && a.Fits == b.Fits && a.Host == b.Host &&
		a.AllocatableMilliCPU == b.AllocatableMilliCPU && a.AllocatableMemoryMiB == b.AllocatableMemoryMiB &&
		a.Chosen == b.Chosen &&
		a.FragmentBefore == b.FragmentBefore && a.FragmentAfter == b.FragmentAfter &&
		slices.Equal(a.GPUs, b.GPUs)
}

// rowHoldsBuiltin reports whether a node's row (gpu.NodeFeatures.AppendRow)
// holds its builtin score as a float32: not where the pod does not fit and
// the score is not 0, as the row's columns that depend on the pod are 0
// there.
func rowHoldsBuiltin(f *gpu.NodeFeatures) bool {
	return f.Fits || math.Float32bits(float32(f.BuiltinScore)) == 0
}

func appendRow(buf []byte, row []float32) []byte {
	for _, v := range row {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	return buf
}
