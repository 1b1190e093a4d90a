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
	fmt.Fprintf(os.Stderr, "policy service: %d requests answered\n", answered.Load())
	stop()
	os.Exit(code)
}

// answered counts the policy service's answers.
var answered atomic.Int64

// instantPolicy is a policy service with no think time: it decodes the
// request's feature matrix, as a real scorer does, and answers each node's
// builtin_score column.
type instantPolicy struct {
	pb.UnimplementedPolicyServiceServer
}

func (instantPolicy) Score(_ context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
	m := req.GetFeatures()
	cols := len(m.GetColumns())
	col := slices.Index(m.GetColumns(), "builtin_score")
	reply := &pb.ScoreReply{Scores: make([]*pb.NodeScore, len(req.Nodes))}
	for i, n := range req.Nodes {
		off := 4 * (i*cols + col)
		reply.Scores[i] = &pb.NodeScore{Node: n.Name, Score: float64(math.Float32frombits(binary.LittleEndian.Uint32(m.Values[off:])))}
	}
	answered.Add(1)
	return reply, nil
}

func servePolicy(addr string) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g := grpc.NewServer()
	pb.RegisterPolicyServiceServer(g, instantPolicy{})
	go func() { _ = g.Serve(lis) }()
	return g.Stop, nil
}

func BenchmarkPerfScheduling(b *testing.B) {
	perf.RunBenchmarkPerfScheduling(b, "performance-config.yaml", "gpusched", plugins.Registry())
}
