// Package bases is a policy service's side of incremental requests
// (ScoreRequest.base, docs/policy-service.md#incremental-requests): it
// keeps each session's table of the nodes the scheduler sent, and expands
// a request that builds on it into a whole one, so that the service scores
// whole requests only. A Go policy service answers with it as
// policyservicetest.Server does:
//
//	whole, kept, err := store.Expand(req)
//	if err != nil {
//		return nil, err // a gRPC status: FailedPrecondition or InvalidArgument
//	}
//	reply := score(whole) // whole shares messages with the table: read only
//	reply.Kept = kept
//
// Answer a request with a session with values in its order, and one
// without by scores naming their nodes: a scheduler that sends no session
// may not read values.
package bases

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// DefaultSessions is how many sessions a Store keeps when its Sessions is
// 0: one per scoring profile of each scheduler or extender that asks, with
// room for restarts.
const DefaultSessions = 16

// MaxSlots bounds a session's table: a slot is below it.
const MaxSlots = 1 << 20

// Store keeps the table of each session. The zero Store is ready to use;
// it is safe for concurrent use.
type Store struct {
	// Sessions is the most sessions kept; past it the least recently used
	// is dropped, and its next incremental request is refused
	// (FailedPrecondition), which the scheduler answers by sending it whole.
	Sessions int

	mu       sync.Mutex
	sessions map[string]*table
	clock    uint64
}

// table is one session's nodes by slot, as of the request of sequence
// version.
type table struct {
	version uint64
	columns []string
	nodes   []*pb.Node // nil where no node was sent
	rows    []byte     // 4·len(columns) bytes a slot
	used    uint64
}

// Expand returns req whole, and whether the session's table is now as of
// req (the reply's kept). A request without a session is whole and kept is
// false. A request with a session and base 0 is whole; it replaces the
// table. A request on the table's version writes its nodes into the table
// and expands to them followed by the reused slots' nodes, with their rows
// and builtin scores. The error is a gRPC status: FailedPrecondition when
// base is not the table's version (nothing changes; the scheduler sends
// the request whole), InvalidArgument when the request is malformed (rows
// that are not one per node, a slot out of range or never sent, other
// feature columns than the table's). The whole request shares Node
// messages with the table: it must not be modified.
func (s *Store) Expand(req *pb.ScoreRequest) (whole *pb.ScoreRequest, kept bool, err error) {
	width := len(req.GetFeatures().GetColumns())
	if got, want := len(req.GetFeatures().GetValues()), 4*width*len(req.Nodes); got != want || int(req.GetFeatures().GetRows()) != len(req.Nodes) {
		return nil, false, status.Errorf(codes.InvalidArgument, "features: %d rows in %d bytes for %d nodes of %d columns: want one row per node, 4 bytes a value",
			req.GetFeatures().GetRows(), got, len(req.Nodes), width)
	}
	if req.Session == "" {
		if req.Base != 0 || len(req.Reused) > 0 || len(req.Slots) > 0 {
			return nil, false, status.Errorf(codes.InvalidArgument, "base, slots, reused: set without a session: want a session")
		}
		return req, false, nil
	}
	if req.Features == nil {
		return nil, false, status.Errorf(codes.InvalidArgument, "features: missing: want the nodes' feature matrix")
	}
	if len(req.Slots) != len(req.Nodes) {
		return nil, false, status.Errorf(codes.InvalidArgument, "slots: %d for %d nodes: want one per node", len(req.Slots), len(req.Nodes))
	}
	for k, slot := range req.Slots {
		if slot < 0 || slot >= MaxSlots {
			return nil, false, status.Errorf(codes.InvalidArgument, "slots[%d] %d: want 0..%d", k, slot, MaxSlots-1)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	t := s.sessions[req.Session]
	if req.Base == 0 {
		if len(req.Reused) > 0 || len(req.BuiltinScores) > 0 {
			return nil, false, status.Errorf(codes.InvalidArgument, "reused, builtin_scores: set without a base: want a base")
		}
		t = &table{columns: req.Features.Columns}
	} else if t == nil || t.version != req.Base {
		held := "none"
		if t != nil {
			held = fmt.Sprint(t.version)
		}
		return nil, false, status.Errorf(codes.FailedPrecondition, "base %d of session %q: the table is as of %s; send the request whole", req.Base, req.Session, held)
	}
	if err := t.check(req); err != nil {
		return nil, false, err
	}
	if req.Base == 0 {
		s.install(req.Session, t)
	}
	t.used = s.clock
	whole = t.apply(req)
	return whole, true, nil
}

// check reports what in req does not fit the table, before anything
// changes.
func (t *table) check(req *pb.ScoreRequest) error {
	if !slices.Equal(t.columns, req.Features.Columns) {
		return status.Errorf(codes.InvalidArgument, "features.columns %v: the table's are %v; a session keeps its columns", req.Features.Columns, t.columns)
	}
	sent := make(map[int32]bool, len(req.Slots))
	for _, slot := range req.Slots {
		if sent[slot] {
			return status.Errorf(codes.InvalidArgument, "slots: %d twice: want each node at its own slot", slot)
		}
		sent[slot] = true
	}
	for k, slot := range req.Reused {
		if slot < 0 || int(slot) >= len(t.nodes) || t.nodes[slot] == nil || sent[slot] {
			return status.Errorf(codes.InvalidArgument, "reused[%d] %d: not a slot the table holds, or sent again: want a slot sent before", k, slot)
		}
	}
	if len(req.BuiltinScores) != len(req.Reused) {
		return status.Errorf(codes.InvalidArgument, "builtin_scores: %d for %d reused nodes: want one per reused node, in their order", len(req.BuiltinScores), len(req.Reused))
	}
	for k, v := range req.BuiltinScores {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return status.Errorf(codes.InvalidArgument, "builtin_scores[%d] %v: want a finite number", k, v)
		}
	}
	return nil
}

// apply writes req's nodes into the table, makes it as of req, and
// returns req whole.
func (t *table) apply(req *pb.ScoreRequest) *pb.ScoreRequest {
	width := 4 * len(t.columns)
	for k, slot := range req.Slots {
		if int(slot) >= len(t.nodes) {
			t.nodes = slices.Grow(t.nodes, int(slot)+1-len(t.nodes))[:slot+1]
			t.rows = slices.Grow(t.rows, (int(slot)+1)*width-len(t.rows))[:(int(slot)+1)*width]
		}
		t.nodes[slot] = req.Nodes[k]
		copy(t.rows[int(slot)*width:], req.Features.Values[k*width:(k+1)*width])
	}
	t.version = req.Sequence
	if req.Base == 0 {
		return req
	}
	whole := &pb.ScoreRequest{Pod: req.Pod, FallbackPolicy: req.FallbackPolicy, Models: req.Models, Groups: req.Groups,
		Session: req.Session, Sequence: req.Sequence, Nodes: make([]*pb.Node, 0, len(req.Nodes)+len(req.Reused))}
	whole.Nodes = append(whole.Nodes, req.Nodes...)
	values := make([]byte, 0, width*cap(whole.Nodes))
	values = append(values, req.Features.Values...)
	column := slices.Index(t.columns, gpu.BuiltinScoreColumn)
	for k, slot := range req.Reused {
		n, score := t.nodes[slot], req.BuiltinScores[k]
		if n.BuiltinScore != score {
			n = withScore(n, score)
		}
		whole.Nodes = append(whole.Nodes, n)
		at := len(values)
		values = append(values, t.rows[int(slot)*width:(int(slot)+1)*width]...)
		if column >= 0 {
			binary.LittleEndian.PutUint32(values[at+4*column:], math.Float32bits(float32(score)))
		}
	}
	whole.Features = &pb.FeatureMatrix{Columns: req.Features.Columns, Rows: int32(len(whole.Nodes)), Values: values}
	return whole
}

// withScore is a copy of a table's Node with another builtin score; the
// GPU columns are shared, as nothing changes them.
func withScore(n *pb.Node, score float64) *pb.Node {
	return &pb.Node{Name: n.Name,
		AllocatableMilliCpu: n.AllocatableMilliCpu, AllocatableMemoryMib: n.AllocatableMemoryMib,
		FreeMilliCpu: n.FreeMilliCpu, FreeMemoryMib: n.FreeMemoryMib,
		GpuIndex: n.GpuIndex, GpuModel: n.GpuModel, GpuFreeMilli: n.GpuFreeMilli,
		GpuMemoryMib: n.GpuMemoryMib, GpuFreeMemoryMib: n.GpuFreeMemoryMib, GpuGroup: n.GpuGroup,
		Chosen: n.Chosen, BuiltinScore: score}
}

// install makes t the session's table, dropping the least recently used
// session when there are too many.
func (s *Store) install(session string, t *table) {
	if s.sessions == nil {
		s.sessions = map[string]*table{}
	}
	delete(s.sessions, session)
	limit := s.Sessions
	if limit <= 0 {
		limit = DefaultSessions
	}
	for len(s.sessions) >= limit {
		var oldest string
		var at uint64
		for id, t := range s.sessions {
			if oldest == "" || t.used < at {
				oldest, at = id, t.used
			}
		}
		delete(s.sessions, oldest)
	}
	s.sessions[session] = t
}
