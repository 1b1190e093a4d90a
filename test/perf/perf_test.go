//go:build perf

// Package perf measures gpusched's scheduling throughput with the upstream
// scheduler_perf harness: a real API server and etcd, the kube-scheduler with
// gpusched's plugins in its registry, and the workloads of
// performance-config.yaml. It needs an etcd binary on PATH (make bin/etcd)
// and runs with `make bench` (build tag "perf", so `go test ./...` skips it).
package perf

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	_ "k8s.io/component-base/logs/json/register"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/policyservice/bases"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// policyServiceAddr is where gpusched-external-config.yaml finds the
// policy service.
const policyServiceAddr = "127.0.0.1:50151"

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	stop, err := servePolicy(policyServiceAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "the External workloads' policy service: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	fmt.Fprintf(os.Stderr, "policy service: %d requests answered, %d of them incremental, %d nodes sent, %d scored\n",
		answered.Load(), incremental.Load(), nodesSent.Load(), nodesScored.Load())
	stop()
	os.Exit(code)
}

// answered counts the policy service's answers; incremental those to
// incremental requests; nodesSent and nodesScored the nodes the requests
// sent and the nodes scored (sent and reused).
var answered, incremental, nodesSent, nodesScored atomic.Int64

// instantPolicy is a policy service with no think time: it keeps each
// session's table and expands incremental requests (package bases), decodes the whole
// request's feature matrix, as a real scorer does, and answers each node's
// builtin_score column as values in the request's order (by name to a
// request without a session).
type instantPolicy struct {
	pb.UnimplementedPolicyServiceServer
	bases *bases.Store
}

func (p instantPolicy) Score(_ context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
	sent := req
	req, kept, err := p.bases.Expand(req)
	if err != nil {
		return nil, err
	}
	if sent.Base != 0 {
		incremental.Add(1)
	}
	nodesSent.Add(int64(len(sent.Nodes)))
	nodesScored.Add(int64(len(req.Nodes)))
	m := req.GetFeatures()
	cols := len(m.GetColumns())
	col := slices.Index(m.GetColumns(), "builtin_score")
	reply := &pb.ScoreReply{}
	for i, n := range req.Nodes {
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(m.Values[4*(i*cols+col):])))
		if req.Session == "" { // a scheduler that may not read values
			reply.Scores = append(reply.Scores, &pb.NodeScore{Node: n.Name, Score: v})
		} else {
			reply.Values = append(reply.Values, v)
		}
	}
	reply.Kept = kept
	answered.Add(1)
	return reply, nil
}

func servePolicy(addr string) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g := grpc.NewServer()
	pb.RegisterPolicyServiceServer(g, instantPolicy{bases: &bases.Store{}})
	go func() { _ = g.Serve(lis) }()
	return g.Stop, nil
}

func BenchmarkPerfScheduling(b *testing.B) {
	perf.RunBenchmarkPerfScheduling(b, "performance-config.yaml", "gpusched", plugins.Registry())
}
