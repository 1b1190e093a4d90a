package bases

import (
	"encoding/binary"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// req is a request of session "s" sending the named nodes at slots, with
// one column (gpu.BuiltinScoreColumn), each node's row its name's first
// letter four times, so that rows can be followed through an expansion.
func req(sequence, base uint64, slots []int32, reused []int32, builtin []float64, names ...string) *pb.ScoreRequest {
	r := &pb.ScoreRequest{Session: "s", Sequence: sequence, Base: base, Slots: slots, Reused: reused, BuiltinScores: builtin,
		Features: &pb.FeatureMatrix{Columns: []string{gpu.BuiltinScoreColumn}, Rows: int32(len(names))}}
	for _, n := range names {
		r.Nodes = append(r.Nodes, &pb.Node{Name: n})
		r.Features.Values = append(r.Features.Values, n[0], n[0], n[0], n[0])
	}
	return r
}

// describe is a whole request's nodes with their rows: "a:aaaa b:bbbb";
// a row that is not its letters shows as its float32.
func describe(r *pb.ScoreRequest) string {
	var parts []string
	for i, n := range r.Nodes {
		row := r.Features.Values[4*i : 4*i+4]
		if row[0] == n.Name[0] && row[3] == n.Name[0] {
			parts = append(parts, n.Name+":"+string(row))
		} else {
			parts = append(parts, n.Name+"="+strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(row))), 'g', -1, 32))
		}
	}
	return strings.Join(parts, " ")
}

// TestExpand: a whole request with the session fills the table; one on
// its version writes its nodes at their slots and expands to them followed
// by the reused slots' nodes, with the builtin scores given (in the Node
// and, as a float32, in the row), leaving the table's messages as they
// were.
func TestExpand(t *testing.T) {
	var s Store
	first := req(1, 0, []int32{0, 1, 2}, nil, nil, "a", "b", "c")
	whole, kept, err := s.Expand(first)
	if err != nil || whole != first || !kept {
		t.Fatalf("a whole request: %v, kept %v, %v; want itself, kept", whole, kept, err)
	}
	// d is sent at a new slot, b again at its own; c and a are reused.
	whole, kept, err = s.Expand(req(2, 1, []int32{3, 1}, []int32{2, 0}, []float64{0.5, 0}, "d", "b"))
	if err != nil || !kept {
		t.Fatalf("kept %v, %v", kept, err)
	}
	if got, want := describe(whole), "d:dddd b:bbbb c=0.5 a=0"; got != want || whole.Features.Rows != 4 || whole.Sequence != 2 || whole.Base != 0 {
		t.Errorf("expanded %q (rows %d, sequence %d, base %d), want %q, 4 rows, sequence 2, no base", got, whole.Features.Rows, whole.Sequence, whole.Base, want)
	}
	if whole.Nodes[2].BuiltinScore != 0.5 || first.Nodes[2].BuiltinScore != 0 {
		t.Errorf("c's builtin score %v in the expansion, %v in the table's message; want 0.5 and 0", whole.Nodes[2].BuiltinScore, first.Nodes[2].BuiltinScore)
	}
	// The table is as of 2: d at slot 3.
	whole, _, err = s.Expand(req(3, 2, nil, []int32{3}, []float64{1}, []string{}...))
	if err != nil || describe(whole) != "d=1" {
		t.Errorf("on version 2: %q, %v; want d=1", describe(whole), err)
	}
	// A request without a session is whole and leaves the table alone.
	plain := req(0, 0, nil, nil, nil, "x")
	plain.Session = ""
	if whole, kept, err := s.Expand(plain); err != nil || kept || whole != plain {
		t.Errorf("without a session: kept %v, %v", kept, err)
	}
	if _, _, err := s.Expand(req(4, 3, nil, []int32{0}, []float64{0}, []string{}...)); err != nil {
		t.Errorf("the table after a request without a session: %v", err)
	}
}

// TestExpandRefuses: each way a request can miss or misfit the table is
// refused with the status the scheduler acts on and a message naming the
// field, and changes nothing.
func TestExpandRefuses(t *testing.T) {
	var s Store
	if _, _, err := s.Expand(req(5, 0, []int32{0, 1}, nil, nil, "a", "b")); err != nil {
		t.Fatal(err)
	}
	otherColumns := req(6, 5, []int32{2}, []int32{0}, []float64{0}, "c")
	otherColumns.Features.Columns = []string{"x"}
	badRows := req(6, 5, []int32{2}, nil, nil, "c")
	badRows.Features.Rows = 2
	otherSession := req(6, 5, []int32{2}, nil, nil, "c")
	otherSession.Session = "t"
	noSession := req(6, 5, nil, nil, nil, "c")
	noSession.Session = ""
	tests := []struct {
		name string
		req  *pb.ScoreRequest
		code codes.Code
		msg  string
	}{
		{"an older base", req(6, 4, []int32{2}, nil, nil, "c"), codes.FailedPrecondition, `base 4 of session "s": the table is as of 5`},
		{"another session", otherSession, codes.FailedPrecondition, `base 5 of session "t": the table is as of none`},
		{"a slot never sent", req(6, 5, []int32{2}, []int32{3}, []float64{0}, "c"), codes.InvalidArgument, "reused[0] 3: not a slot the table holds"},
		{"a slot sent and reused", req(6, 5, []int32{0}, []int32{0}, []float64{0}, "c"), codes.InvalidArgument, "reused[0] 0: not a slot the table holds, or sent again"},
		{"a slot twice", req(6, 5, []int32{2, 2}, nil, nil, "c", "d"), codes.InvalidArgument, "slots: 2 twice"},
		{"a slot out of range", req(6, 5, []int32{MaxSlots}, nil, nil, "c"), codes.InvalidArgument, "slots[0] 1048576: want 0..1048575"},
		{"slots not one per node", req(6, 5, nil, nil, nil, "c"), codes.InvalidArgument, "slots: 0 for 1 nodes"},
		{"other columns", otherColumns, codes.InvalidArgument, "features.columns [x]: the table's are [builtin_score]"},
		{"rows not one per node", badRows, codes.InvalidArgument, "features: 2 rows in 4 bytes for 1 nodes"},
		{"builtin scores missing", req(6, 5, []int32{2}, []int32{0}, nil, "c"), codes.InvalidArgument, "builtin_scores: 0 for 1 reused nodes"},
		{"a builtin score NaN", req(6, 5, []int32{2}, []int32{0}, []float64{math.NaN()}, "c"), codes.InvalidArgument, "builtin_scores[0] NaN: want a finite number"},
		{"reused without a base", req(6, 0, []int32{2}, []int32{0}, []float64{0}, "c"), codes.InvalidArgument, "reused, builtin_scores: set without a base"},
		{"a base without a session", noSession, codes.InvalidArgument, "base, slots, reused: set without a session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.Expand(tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want %v with %q", err, tt.code, tt.msg)
			}
		})
	}
	// Nothing changed: the table is still as of 5, with a and b.
	if whole, _, err := s.Expand(req(7, 5, nil, []int32{1, 0}, []float64{0, 0}, []string{}...)); err != nil || describe(whole) != "b=0 a=0" {
		t.Errorf("after the refusals: %q, %v; want the table as of 5", describe(whole), err)
	}
}

// TestSessions: past Sessions, the least recently used session's table is
// dropped.
func TestSessions(t *testing.T) {
	s := Store{Sessions: 2}
	start := func(session string, sequence uint64) {
		r := req(sequence, 0, []int32{0}, nil, nil, "a")
		r.Session = session
		if _, _, err := s.Expand(r); err != nil {
			t.Fatal(err)
		}
	}
	onTable := func(session string, base uint64) error {
		r := req(base+1, base, nil, []int32{0}, []float64{0}, []string{}...)
		r.Session = session
		_, _, err := s.Expand(r)
		return err
	}
	start("s", 1)
	start("t", 1)
	if err := onTable("s", 1); err != nil { // s used after t
		t.Fatal(err)
	}
	start("u", 1) // drops t
	for session, base := range map[string]uint64{"s": 2, "u": 1} {
		if err := onTable(session, base); err != nil {
			t.Errorf("session %s: %v", session, err)
		}
	}
	if err := onTable("t", 1); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("session t, dropped: %v, want FailedPrecondition", err)
	}
}

// TestExpandConcurrent: requests of one session racing on one version: one
// is applied, the others refused with FailedPrecondition, never expanded
// against a table another changed (run with -race).
func TestExpandConcurrent(t *testing.T) {
	var s Store
	if _, _, err := s.Expand(req(1, 0, []int32{0, 1}, nil, nil, "a", "b")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('c' + g))
			whole, kept, err := s.Expand(req(uint64(2+g), 1, []int32{1}, []int32{0}, []float64{0}, name))
			switch {
			case err == nil:
				if got, want := describe(whole), name+":"+strings.Repeat(name, 4)+" a=0"; !kept || got != want {
					t.Errorf("applied %q (kept %v), want %q", got, kept, want)
				}
				mu.Lock()
				applied++
				mu.Unlock()
			case status.Code(err) != codes.FailedPrecondition:
				t.Errorf("%s: %v, want FailedPrecondition", name, err)
			}
		}()
	}
	wg.Wait()
	if applied != 1 {
		t.Errorf("%d requests on version 1 applied, want 1", applied)
	}
}

// TestWithScoreCopiesEveryField: a Node field added to the protocol and
// not copied by withScore fails here.
func TestWithScoreCopiesEveryField(t *testing.T) {
	n := &pb.Node{}
	v := reflect.ValueOf(n).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i + 1))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			f.Index(0).SetInt(int64(i + 1))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	c := withScore(n, 0.5)
	if c.BuiltinScore != 0.5 {
		t.Errorf("builtin score %v, want 0.5", c.BuiltinScore)
	}
	c.BuiltinScore = n.BuiltinScore
	if !proto.Equal(c, n) {
		t.Errorf("copy %v, want %v", c, n)
	}
}
