// Package policyservicetest runs a policy service on loopback whose answers
// a test chooses, and reads the policy service's metrics back from the
// registry the scheduler's /metrics serves.
package policyservicetest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpusched/gpusched/pkg/policyservice/bases"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// Answer answers one request.
type Answer func(ctx context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error)

// Server is a policy service on 127.0.0.1. It keeps each session's table
// of nodes (package bases) unless NoBases is set, and answers every
// request whole: an Answer sees each request with all its nodes, and must
// not modify it.
type Server struct {
	pb.UnimplementedPolicyServiceServer
	// Addr is the service's host:port.
	Addr string
	// Calls counts the requests received.
	Calls atomic.Int64
	// NoBases makes the service one that keeps no tables: it ignores a
	// request's base, slots and reused nodes, as a service written before
	// incremental requests does.
	NoBases atomic.Bool

	mu       sync.Mutex
	answer   Answer
	last     *pb.ScoreRequest
	lastSent *pb.ScoreRequest
	bases    *bases.Store
}

// Start serves answer until the test ends.
func Start(t testing.TB, answer Answer) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: lis.Addr().String(), answer: answer, bases: &bases.Store{}}
	g := grpc.NewServer()
	pb.RegisterPolicyServiceServer(g, s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return s
}

// Set changes the answer.
func (s *Server) Set(answer Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = answer
}

// Last is the last request answered, whole; nil before the first.
func (s *Server) Last() *pb.ScoreRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// LastSent is the last request received, as it was sent (incremental or
// whole); nil before the first.
func (s *Server) LastSent() *pb.ScoreRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSent
}

// Forget drops every table, as a restarted service has none.
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bases = &bases.Store{}
}

// Score implements pb.PolicyServiceServer.
func (s *Server) Score(ctx context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
	s.Calls.Add(1)
	whole, kept := req, false
	var err error
	if !s.NoBases.Load() {
		whole, kept, err = s.store().Expand(req)
	}
	s.mu.Lock()
	s.lastSent = req
	if err == nil {
		s.last = whole
	}
	answer := s.answer
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	reply, err := answer(ctx, whole)
	if err == nil && reply != nil {
		reply.Kept = kept
	}
	return reply, err
}

func (s *Server) store() *bases.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bases == nil {
		s.bases = &bases.Store{}
	}
	return s.bases
}

// Prefer answers score 1 for the named node and 0 for every other, as
// values in the request's order (by name to a request without a session,
// as the protocol asks).
func Prefer(node string) Answer {
	return func(ctx context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
		if req.Session == "" {
			return PreferByName(node)(ctx, req)
		}
		reply := &pb.ScoreReply{Values: make([]float64, len(req.Nodes))}
		for i, n := range req.Nodes {
			if n.Name == node {
				reply.Values[i] = 1
			}
		}
		return reply, nil
	}
}

// PreferByName is Prefer answering scores that name their nodes.
func PreferByName(node string) Answer {
	return func(_ context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
		reply := &pb.ScoreReply{}
		for _, n := range req.Nodes {
			score := 0.0
			if n.Name == node {
				score = 1
			}
			reply.Scores = append(reply.Scores, &pb.NodeScore{Node: n.Name, Score: score})
		}
		return reply, nil
	}
}

// Metric is the value of the named counter or gauge with the given label
// (name=value; "" for none) in the registry the scheduler's /metrics
// serves; 0 when it has no such series.
func Metric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
