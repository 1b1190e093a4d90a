package policyservice

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// byContent scores each node of a whole request from its Node message and
// its feature row, so that a node sent with the wrong message or row, or a
// row paired with another node, gets another score:
// builtin_score + Σ gpu_free_milli/1000 + 10·fits + 100·free_gpu, plus a
// hash of the whole message. It
// answers values in the request's order for an even sequence, scores by
// name for an odd one, so that both are followed through the reordering.
func byContent(_ context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
	width := len(req.Features.Columns)
	fits, freeGPU := slices.Index(req.Features.Columns, "fits"), slices.Index(req.Features.Columns, "free_gpu")
	rows := decodeRows(req.Features.Values)
	reply := &pb.ScoreReply{}
	for i, n := range req.Nodes {
		score := n.BuiltinScore
		for _, m := range n.GpuFreeMilli {
			score += float64(m) / 1000
		}
		score += 10*float64(rows[i*width+fits]) + 100*float64(rows[i*width+freeGPU])
		// Every other field, the GPUs' models and groups by name: a stale
		// message or a wrong table index changes the score.
		h := fnv.New32a()
		h.Write([]byte(resolved(n, req)))
		score += float64(h.Sum32()%1000) / 1e6
		reply.Scores = append(reply.Scores, &pb.NodeScore{Node: n.Name, Score: score})
		reply.Values = append(reply.Values, score)
	}
	if req.Sequence%2 == 0 {
		reply.Scores = nil
	} else {
		reply.Values = nil
	}
	return reply, nil
}

func decodeRows(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// resolved is a Node message with its GPUs' models and groups named, as
// the request's tables name them: two requests index the same name
// differently.
func resolved(n *pb.Node, req *pb.ScoreRequest) string {
	c := proto.Clone(n).(*pb.Node)
	var names []string
	for i := range c.GpuModel {
		names = append(names, req.Models[c.GpuModel[i]]+"/"+req.Groups[c.GpuGroup[i]])
	}
	c.GpuModel, c.GpuGroup = nil, nil
	return fmt.Sprint(c, names)
}

// testNodes are n nodes of 8 GPUs, node i with i GPUs busy, of two models
// and three interconnect groups, in an order that depends on n (so that
// the tables of models and groups list them in another order).
func testNodes(n int) []gpu.NodeFeatures {
	out := make([]gpu.NodeFeatures, n)
	for i := range out {
		gpus := make([]gpu.GPUFeatures, 8)
		for g := range gpus {
			free := int64(gpu.MilliPerGPU)
			if g < i {
				free = 0
			}
			gpus[g] = gpu.GPUFeatures{Index: g, Model: []string{"A100", "H100"}[(i+g/4)%2], FreeMilli: free, MemoryMiB: 81920,
				FreeMemoryMiB: 81920 * free / 1000, Group: fmt.Sprintf("nvl-%d", (n-i+g/4)%3)}
		}
		out[i] = gpu.NodeFeatures{Name: fmt.Sprintf("node-%d", i), Fits: true, GPUs: gpus, Chosen: gpu.DeviceSet(1) << 7,
			Host:                gpu.Host{Known: true, FreeMilliCPU: 32000, FreeMemoryMiB: 1 << 17, MaxMilliCPU: 64000, MaxGPUs: 8},
			AllocatableMilliCPU: 64000, AllocatableMemoryMiB: 1 << 18, BuiltinScore: float64(i) / float64(n)}
	}
	return out
}

// TestIncrementalRequests: after the first request the service keeps,
// only the nodes whose message or row changed are sent, and every node is
// scored as a whole request scores it, through a change of node, of pod,
// of order and membership, a service restart (its bases gone) and a
// service that ignores bases.
func TestIncrementalRequests(t *testing.T) {
	srv := policyservicetest.Start(t, byContent)
	s, err := New(config.ExternalPolicy{Endpoint: srv.Addr, Timeout: 10 * time.Second, Mode: config.ExternalEnforce,
		CircuitBreaker: config.CircuitBreaker{Failures: 100, OpenFor: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pod := &v1.Pod{}
	whole := &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	share := &gpu.Demand{Count: 1, Milli: 250}
	resent := func() float64 {
		return policyservicetest.Metric(t, "gpusched_external_policy_requests_total", "kind", "resent")
	}
	step := func(name string, d *gpu.Demand, nodes []gpu.NodeFeatures, wantSent int, wantBase bool) {
		t.Helper()
		calls := srv.Calls.Load()
		got, fb := s.ScoreNodes(context.Background(), pod, d, nodes, gpu.PolicyFragFit)
		if fb != nil {
			t.Fatalf("%s: fallback %v", name, fb)
		}
		wholeReq := wholeRequest(pod, d, nodes, gpu.PolicyFragFit)
		wholeReq.Sequence = 1 // scores by name, in the nodes' order
		reply, _ := byContent(context.Background(), wholeReq)
		for i, sc := range reply.Scores {
			if got[i] != sc.Score {
				t.Errorf("%s: node %s scored %v, want %v (as a whole request scores it)", name, nodes[i].Name, got[i], sc.Score)
			}
		}
		sent := srv.LastSent()
		if len(sent.Nodes) != wantSent || (sent.Base != 0) != wantBase {
			t.Errorf("%s: the last request sent %d nodes with base %d (%d calls), want %d nodes, a base %v",
				name, len(sent.Nodes), sent.Base, srv.Calls.Load()-calls, wantSent, wantBase)
		}
		// What the service scored is the whole request, node for node and
		// row for row, bit for bit.
		expanded, width := srv.Last(), len(wholeReq.Features.Columns)
		at := map[string]int{}
		for k, n := range expanded.Nodes {
			at[n.Name] = k
		}
		for i, n := range wholeReq.Nodes {
			k, ok := at[n.Name]
			if !ok || len(expanded.Nodes) != len(wholeReq.Nodes) {
				t.Fatalf("%s: the service scored %d nodes, want %d with %s", name, len(expanded.Nodes), len(wholeReq.Nodes), n.Name)
			}
			if got, want := resolved(expanded.Nodes[k], expanded), resolved(n, wholeReq); got != want {
				t.Errorf("%s: the service saw node %s as\n%s\nwant\n%s", name, n.Name, got, want)
			}
			got, want := expanded.Features.Values[4*k*width:4*(k+1)*width], wholeReq.Features.Values[4*i*width:4*(i+1)*width]
			if !bytes.Equal(got, want) {
				t.Errorf("%s: the service saw node %s's row as %v, want %v", name, n.Name, decodeRows(got), decodeRows(want))
			}
		}
	}
	nodes := testNodes(6)
	// A node the pod does not fit on has a builtin score in its Node message
	// but 0 in its row: it is never reused, since the service would write
	// the score into the row.
	nodes[5].Fits, nodes[5].BuiltinScore = false, 0.3
	step("first: whole", whole, nodes, 6, false)
	step("unchanged: only the node that does not fit sent", whole, nodes, 1, true)
	nodes[5].Fits, nodes[5].BuiltinScore = true, 0
	step("it fits again", whole, nodes, 1, true)
	step("unchanged: none sent", whole, nodes, 0, true)

	nodes = slices.Clone(nodes)
	nodes[2].GPUs = slices.Clone(nodes[2].GPUs)
	nodes[2].GPUs[7].FreeMilli = 500
	step("a GPU of one node changed", whole, nodes, 1, true)

	// Every node's builtin score travels in builtin_scores: a change to it
	// alone sends no node.
	nodes[4].BuiltinScore = 0.99
	step("one node's builtin score changed", whole, nodes, 0, true)
	for i := range nodes {
		nodes[i].BuiltinScore /= 2
	}
	step("every node's builtin score changed", whole, nodes, 0, true)

	// A share's row differs from a whole GPU's in its per-pod columns on
	// every node (chosen_free_after).
	step("another pod shape", share, nodes, 6, true)
	step("the same shape again", share, nodes, 0, true)

	moved := []gpu.NodeFeatures{nodes[5], nodes[0], testNodes(7)[6], nodes[3], nodes[1]} // node-2 and node-4 gone, node-6 new
	step("reordered, two gone, one new", share, moved, 1, true)

	// A GPU model and a group the session's tables have not seen.
	moved[2].GPUs = slices.Clone(moved[2].GPUs)
	moved[2].GPUs[0].Model, moved[2].GPUs[0].Group = "L40S", "pcie-9"
	step("a new model and group", share, moved, 1, true)
	step("unchanged after them", share, moved, 0, true)

	before, calls := resent(), srv.Calls.Load()
	srv.Forget()
	step("after the service lost its bases", share, moved, 5, false)
	if resent() != before+1 || srv.Calls.Load() != calls+2 {
		t.Errorf("after the service lost its bases: %v resent, %d calls; want 1 resent, 2 calls", resent()-before, srv.Calls.Load()-calls)
	}
	step("and then incremental again", share, moved, 0, true)

	srv.NoBases.Store(true)
	before = resent()
	step("a service that ignores bases", share, moved, 5, false)
	if resent() != before+1 {
		t.Errorf("a service that ignores bases: %v resent, want 1", resent()-before)
	}
	step("then only whole requests", share, moved, 5, false)
}

// TestIncrementalConcurrentCalls: calls made while one is in flight (the
// extender's) are sent whole without the session, and every call's scores
// are its own nodes', under the race detector too.
func TestIncrementalConcurrentCalls(t *testing.T) {
	srv := policyservicetest.Start(t, func(ctx context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
		time.Sleep(time.Millisecond) // keep calls in flight together
		return byContent(ctx, req)
	})
	s, err := New(config.ExternalPolicy{Endpoint: srv.Addr, Timeout: 10 * time.Second, Mode: config.ExternalEnforce,
		CircuitBreaker: config.CircuitBreaker{Failures: 100, OpenFor: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pod, d := &v1.Pod{}, &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	incremental := func() float64 {
		return policyservicetest.Metric(t, "gpusched_external_policy_requests_total", "kind", "incremental")
	}
	before := incremental()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 20 {
				nodes := testNodes(6 + (g+round)%3)
				nodes[round%len(nodes)].BuiltinScore = float64(g) / 10
				got, fb := s.ScoreNodes(context.Background(), pod, d, nodes, gpu.PolicyFragFit)
				if fb != nil {
					t.Errorf("caller %d round %d: fallback %v", g, round, fb)
					return
				}
				wholeReq := wholeRequest(pod, d, nodes, gpu.PolicyFragFit)
				wholeReq.Sequence = 1
				want, _ := byContent(context.Background(), wholeReq)
				for i, sc := range want.Scores {
					if got[i] != sc.Score {
						t.Errorf("caller %d round %d: node %s scored %v, want %v", g, round, nodes[i].Name, got[i], sc.Score)
					}
				}
			}
		}()
	}
	wg.Wait()
	if incremental() == before {
		t.Error("no request was incremental")
	}
}

// TestSameNodeSeesEveryField: a change to any field of a node's features
// but its builtin score makes it a changed node. A field added to
// gpu.NodeFeatures and not compared fails here.
func TestSameNodeSeesEveryField(t *testing.T) {
	base := testNodes(2)[1]
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		changed := base
		changed.GPUs = slices.Clone(base.GPUs)
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Float64:
			f.SetFloat(f.Float() + 0.5)
		case reflect.Struct: // Host
			f.Field(1).SetInt(f.Field(1).Int() + 1)
		case reflect.Slice: // GPUs
			changed.GPUs[0].FreeMemoryMiB++
		default:
			t.Fatalf("field %s of kind %v: teach this test to change it", typ.Field(i).Name, f.Kind())
		}
		// The builtin score alone is not compared: builtin_scores carries it.
		if got, want := sameNode(&base, &changed), typ.Field(i).Name == "BuiltinScore"; got != want {
			t.Errorf("field %s changed: the same node %v, want %v", typ.Field(i).Name, got, want)
		}
	}
	if !sameNode(&base, &base) {
		t.Error("a node differs from itself")
	}
}

// wholeRequest is the request for a pod with every node sent, as a service
// that keeps no table gets it: what an incremental request must expand to.
func wholeRequest(pod *v1.Pod, d *gpu.Demand, nodes []gpu.NodeFeatures, fallback gpu.PolicyType) *pb.ScoreRequest {
	req := &pb.ScoreRequest{Pod: PodMessage(pod, d), Nodes: make([]*pb.Node, len(nodes)),
		Features: Matrix(nodes, d, nil), FallbackPolicy: string(fallback)}
	var t Tables
	for i := range nodes {
		req.Nodes[i] = NodeMessage(&nodes[i], &t)
	}
	req.Models, req.Groups = t.Models, t.Groups
	return req
}
