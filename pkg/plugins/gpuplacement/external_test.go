package gpuplacement_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// externalArgs are GPUPlacement's args for the External strategy, loaded as
// a user writes them (defaults, conversion, validation), with FragFit as the
// fallback and a timeout of 2s unless extra (more of the external field)
// sets one.
func externalArgs(t *testing.T, endpoint, extra string) *config.GPUPlacementArgs {
	t.Helper()
	if !strings.Contains(extra, "timeout:") {
		extra += "  timeout: 2s\n"
	}
	args, err := load.GPUPlacementArgsFromYAML([]byte(fmt.Sprintf(
		"scoringStrategy:\n  type: External\nexternal:\n  endpoint: %q\n  fallback: FragFit\n%s", endpoint, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// externalNodes are two GPU nodes a share fits on both of: an A100 node
// with one GPU half used (FragFit's choice for a share of 500: it fills the
// half-used GPU) and an idle T4 node.
func externalNodes() ([]*v1.Node, []*v1.Pod) {
	nodes := []*v1.Node{gt.MakeGPUNode("a100").GFD(a100, 2, 81920).Obj(), gt.MakeGPUNode("t4").GFD(t4, 2, 15360).Obj()}
	held := gt.MakeGPUPod("held").Milli(500).Annotation(gpu.AnnotationAssigned, "a100:0@500").Obj()
	held.Spec.NodeName = "a100"
	return nodes, []*v1.Pod{held}
}

// fallbackScores are the scores GPUPlacement gives pod with FragFit alone.
func fallbackScores(t *testing.T, pod *v1.Pod) map[string]int64 {
	t.Helper()
	nodes, pods := externalNodes()
	args, err := load.GPUPlacementArgsFromYAML([]byte("scoringStrategy:\n  type: FragFit\n"))
	if err != nil {
		t.Fatal(err)
	}
	return scoreAll(t, newCluster(t, args, nodes, pods), pod)
}

func best(scores map[string]int64) string {
	name, top := "", int64(-1)
	for n, s := range scores {
		if s > top || (s == top && n < name) {
			name, top = n, s
		}
	}
	return name
}

// TestExternalPolicyScoresRankNodes: in Enforce mode the service's scores,
// rescaled min-max to 0..100, are GPUPlacement's scores, whichever node the
// fallback prefers; the request carries the pod, every feasible node with
// its GPUs and the fallback's choice and score, and the feature matrix.
func TestExternalPolicyScoresRankNodes(t *testing.T) {
	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	builtin := best(fallbackScores(t, pod))
	if builtin != "a100" {
		t.Fatalf("FragFit prefers %s; the test wants it to prefer a100", builtin)
	}
	srv := policyservicetest.Start(t, policyservicetest.Prefer("t4"))
	nodes, pods := externalNodes()
	c := newCluster(t, externalArgs(t, srv.Addr, ""), nodes, pods)
	// t4 answered 1, a100 0: min-max to 0..100.
	if got, want := scoreAll(t, c, pod), map[string]int64{"t4": 100, "a100": 0}; !equalScores(got, want) {
		t.Errorf("scores %v, want the service's %v", got, want)
	}
	srv.Set(policyservicetest.Prefer("a100"))
	if got, want := scoreAll(t, c, pod), map[string]int64{"t4": 0, "a100": 100}; !equalScores(got, want) {
		t.Errorf("scores %v, want the service's %v", got, want)
	}

	req := srv.Last()
	if req.Pod.GetName() != "share" || req.Pod.GetMilliGpu() != 500 || req.Pod.GetGpus() != 1 || req.FallbackPolicy != "FragFit" {
		t.Errorf("request's pod %v, fallback %q", req.Pod, req.FallbackPolicy)
	}
	if len(req.Nodes) != 2 || int(req.Features.GetRows()) != 2 || len(req.Features.GetValues()) != 4*2*len(req.Features.GetColumns()) {
		t.Fatalf("request has %d nodes, a %d-row matrix of %d bytes for %d columns", len(req.Nodes), req.Features.GetRows(), len(req.Features.GetValues()), len(req.Features.GetColumns()))
	}
	for _, n := range req.Nodes {
		switch n.Name {
		case "a100":
			// FragFit fills the half-used GPU 0; rank-rescaled, its best node scores 1.
			if len(n.GpuIndex) != 2 || n.GpuFreeMilli[0] != 500 || n.GpuFreeMilli[1] != 1000 || len(n.Chosen) != 1 || n.Chosen[0] != 0 || n.BuiltinScore != 1 {
				t.Errorf("a100 described as %v", n)
			}
		case "t4":
			if req.Models[n.GpuModel[0]] != t4 || n.GpuFreeMemoryMib[1] != 15360 || n.BuiltinScore >= 1 {
				t.Errorf("t4 described as %v", n)
			}
		}
	}
}

// TestExternalPolicyFallback: whatever goes wrong with the service — no
// answer within the deadline, no service at all, a reply with the wrong
// number of scores, a NaN, a node it was not asked about — the fallback
// policy's scores decide, exactly, an event on the pod says why, and the
// fallbacks metric counts the cause.
func TestExternalPolicyFallback(t *testing.T) {
	refused := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		return addr
	}
	scores := func(pairs ...any) policyservicetest.Answer {
		return func(context.Context, *pb.ScoreRequest) (*pb.ScoreReply, error) {
			reply := &pb.ScoreReply{}
			for i := 0; i < len(pairs); i += 2 {
				reply.Scores = append(reply.Scores, &pb.NodeScore{Node: pairs[i].(string), Score: pairs[i+1].(float64)})
			}
			return reply, nil
		}
	}
	tests := []struct {
		name   string
		answer policyservicetest.Answer // nil: nothing listens
		cause  string
		event  string
	}{
		{"deadline exceeded", func(ctx context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, "timeout", "no answer within 50ms"},
		{"connection refused", nil, "error", "Unavailable"},
		{"error status", func(context.Context, *pb.ScoreRequest) (*pb.ScoreReply, error) {
			return nil, errors.New("model not loaded")
		}, "error", "model not loaded"},
		{"wrong number of scores", scores("t4", 1.0), "malformed", "1 scores for 2 nodes"},
		{"NaN", scores("t4", 1.0, "a100", math.NaN()), "malformed", `score NaN for node "a100"`},
		{"unknown node", scores("t4", 1.0, "h100", 2.0), "malformed", `node "h100", which is not one of the request's nodes`},
		{"a node twice", scores("t4", 1.0, "t4", 2.0), "malformed", `two scores for node "t4"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := gt.MakeGPUPod("share").Milli(500).Obj()
			want := fallbackScores(t, pod)
			endpoint := refused()
			if tt.answer != nil {
				endpoint = policyservicetest.Start(t, tt.answer).Addr
			}
			nodes, pods := externalNodes()
			// A breaker that does not open within the test's one call.
			c := newCluster(t, externalArgs(t, endpoint, "  timeout: 50ms\n"), nodes, pods)
			before := policyservicetest.Metric(t, "gpusched_external_policy_fallbacks_total", "cause", tt.cause)
			if got := scoreAll(t, c, pod); !equalScores(got, want) {
				t.Errorf("scores %v, want the fallback's %v", got, want)
			}
			if got := policyservicetest.Metric(t, "gpusched_external_policy_fallbacks_total", "cause", tt.cause) - before; got != 1 {
				t.Errorf("fallbacks{cause=%s} grew by %v, want 1", tt.cause, got)
			}
			select {
			case e := <-c.recorder.Events:
				if !strings.Contains(e, "ExternalPolicyFallback") || !strings.Contains(e, tt.event) || !strings.Contains(e, "FragFit scored the nodes") {
					t.Errorf("event %q, want ExternalPolicyFallback saying %q", e, tt.event)
				}
			default:
				t.Error("no event on the pod")
			}
		})
	}
}

// TestExternalPolicyCircuitBreaker: after two failed calls in a row the
// breaker opens — no call for openFor, the fallback decides, the gauge says
// open — then one call tries again, and a good answer closes it.
func TestExternalPolicyCircuitBreaker(t *testing.T) {
	failing := func(context.Context, *pb.ScoreRequest) (*pb.ScoreReply, error) {
		return nil, errors.New("overloaded")
	}
	srv := policyservicetest.Start(t, failing)
	nodes, pods := externalNodes()
	const openFor = 300 * time.Millisecond
	c := newCluster(t, externalArgs(t, srv.Addr, "  circuitBreaker:\n    failures: 2\n    openFor: 300ms\n"), nodes, pods)
	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	want := fallbackScores(t, pod)
	openBefore := policyservicetest.Metric(t, "gpusched_external_policy_fallbacks_total", "cause", "circuit-open")

	for range 2 {
		scoreAll(t, c, pod)
	}
	if got := srv.Calls.Load(); got != 2 {
		t.Fatalf("%d calls, want 2", got)
	}
	opened := time.Now()
	if got := scoreAll(t, c, pod); !equalScores(got, want) {
		t.Errorf("open: scores %v, want the fallback's %v", got, want)
	}
	if time.Since(opened) < openFor {
		if got := srv.Calls.Load(); got != 2 {
			t.Errorf("open: %d calls, want still 2", got)
		}
		if got := policyservicetest.Metric(t, "gpusched_external_policy_fallbacks_total", "cause", "circuit-open") - openBefore; got != 1 {
			t.Errorf("fallbacks{cause=circuit-open} grew by %v, want 1", got)
		}
		if got := policyservicetest.Metric(t, "gpusched_external_policy_circuit_open", "", ""); got != 1 {
			t.Errorf("circuit_open %v, want 1", got)
		}
	}

	srv.Set(policyservicetest.Prefer("t4"))
	time.Sleep(openFor)
	if got, want := scoreAll(t, c, pod), map[string]int64{"t4": 100, "a100": 0}; !equalScores(got, want) {
		t.Errorf("after openFor: scores %v, want the service's %v", got, want)
	}
	if got := srv.Calls.Load(); got != 3 {
		t.Errorf("after openFor: %d calls, want 3", got)
	}
	if got := policyservicetest.Metric(t, "gpusched_external_policy_circuit_open", "", ""); got != 0 {
		t.Errorf("circuit_open %v after a good answer, want 0", got)
	}
}

// TestExternalPolicyShadowNeverDecides: in Shadow mode the service is asked
// and its disagreement counted, but the fallback's scores decide, exactly.
func TestExternalPolicyShadowNeverDecides(t *testing.T) {
	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	want := fallbackScores(t, pod)
	srv := policyservicetest.Start(t, policyservicetest.Prefer("t4"))
	nodes, pods := externalNodes()
	c := newCluster(t, externalArgs(t, srv.Addr, "  mode: Shadow\n"), nodes, pods)
	differ := policyservicetest.Metric(t, "gpusched_external_policy_disagreements_total", "mode", "Shadow")
	compared := policyservicetest.Metric(t, "gpusched_external_policy_compared_total", "mode", "Shadow")
	if got := scoreAll(t, c, pod); !equalScores(got, want) {
		t.Errorf("shadow: scores %v, want the fallback's %v", got, want)
	}
	srv.Set(policyservicetest.Prefer("a100"))
	if got := scoreAll(t, c, pod); !equalScores(got, want) {
		t.Errorf("shadow: scores %v, want the fallback's %v", got, want)
	}
	if got := srv.Calls.Load(); got != 2 {
		t.Errorf("%d calls, want 2", got)
	}
	// t4 differs from FragFit's a100; a100 agrees.
	if got := policyservicetest.Metric(t, "gpusched_external_policy_disagreements_total", "mode", "Shadow") - differ; got != 1 {
		t.Errorf("disagreements grew by %v, want 1", got)
	}
	if got := policyservicetest.Metric(t, "gpusched_external_policy_compared_total", "mode", "Shadow") - compared; got != 2 {
		t.Errorf("compared grew by %v, want 2", got)
	}
}

// TestExternalModelScoresRankNodes: with external.model the scheduler
// scores the nodes with the model file itself, rescaled as a service's
// answer is; a model whose scores overflow falls back to FragFit's scores
// exactly.
func TestExternalModelScoresRankNodes(t *testing.T) {
	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	dir := t.TempDir()
	model := func(name, columns, weights string) *config.GPUPlacementArgs {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(`{"format": "gpusched.io/model/v1", "columns": `+columns+
			`, "layers": [{"weights": [`+weights+`], "bias": [0]}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		args, err := load.GPUPlacementArgsFromYAML([]byte(fmt.Sprintf(
			"scoringStrategy:\n  type: External\nexternal:\n  model: %q\n  fallback: FragFit\n", path)))
		if err != nil {
			t.Fatal(err)
		}
		return args
	}
	for _, tc := range []struct {
		name             string
		columns, weights string
		want             map[string]int64
	}{
		// free_gpu_after of the largest node's 2 GPUs: t4 (idle) keeps
		// 1500 milli free, 0.75; a100 (500 used) 1000, 0.5. Min-max: t4
		// 100, a100 0.
		{"emptiest node", `["free_gpu_after"]`, `[1]`, map[string]int64{"t4": 100, "a100": 0}},
		// FragFit's own score: a100 is its best (1), t4 less.
		{"fallback's score", `["builtin_score"]`, `[1]`, map[string]int64{"t4": 0, "a100": 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := externalNodes()
			c := newCluster(t, model(tc.name, tc.columns, tc.weights), nodes, pods)
			if got := scoreAll(t, c, pod); !equalScores(got, tc.want) {
				t.Errorf("scores %v, want %v", got, tc.want)
			}
		})
	}
	nodes, pods := externalNodes()
	c := newCluster(t, model("overflow", `["builtin_score", "fits"]`, `[1e308, 1e308]`), nodes, pods)
	if got, want := scoreAll(t, c, pod), fallbackScores(t, pod); !equalScores(got, want) {
		t.Errorf("an overflowing model: scores %v, want FragFit's %v", got, want)
	}
}
