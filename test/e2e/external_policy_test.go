package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/internal/pythontest"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// externalPolicyConfig runs GPUPlacement with the External strategy as the
// only scorer, so that the policy service alone ranks the nodes.
const externalPolicyConfig = `
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
    score:
      disabled:
      - name: "*"
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: GPUPlacement
    args:
      scoringStrategy:
        type: External
      external:
        endpoint: %s
        timeout: 2s
        fallback: FragFit
`

// TestExternalPolicyServedFromPython: the live scheduler, asking the
// example policy service (python/examples/serve_linear.py serving the
// trained linear scorer), binds every pod to a node the service scored
// best (a set, since equal nodes score alike), and never falls back.
func TestExternalPolicyServedFromPython(t *testing.T) {
	python := pythontest.Python(t, "numpy", "grpc", "google.protobuf")
	ctx := context.Background()
	root := repoRoot()
	addr := freeLoopbackAddr(t)
	decisions := filepath.Join(t.TempDir(), "decisions.jsonl")
	server := exec.Command(python, filepath.Join(root, "python", "examples", "serve_linear.py"),
		"--weights", filepath.Join(root, "python", "examples", "linear_scorer.json"),
		"--address", addr, "--decisions", decisions)
	server.Dir = root
	server.Stdout, server.Stderr = os.Stderr, os.Stderr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	waitForListener(t, addr, 30*time.Second)

	c := testcluster.Start(t)
	nodes := []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Clique("nvl-a").Obj(),
		gt.MakeGPUNode("a100-1").GFD(a100, 4, 81920).Obj(),
		gt.MakeGPUNode("h100-0").GFD(h100, 8, 81559).Obj(),
		gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("t4-1").GFD(t4, 2, 15360).Obj(),
	}
	for _, n := range nodes {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	fallbacksBefore := totalFallbacks(t)
	c.StartScheduler(ctx, t, fmt.Sprintf(externalPolicyConfig, addr), plugins.CommandOptions()...)

	pods := []*v1.Pod{
		gt.MakeGPUPod("share-500").Milli(500).Obj(),
		gt.MakeGPUPod("whole-1").GPUs(1).Obj(),
		gt.MakeGPUPod("share-300").Milli(300).Obj(),
		gt.MakeGPUPod("whole-2").GPUs(2).Obj(),
		gt.MakeGPUPod("share-700").Milli(700).Obj(),
		gt.MakeGPUPod("whole-4").GPUs(4).Obj(),
		gt.MakeGPUPod("share-250").Milli(250).Obj(),
		gt.MakeGPUPod("whole-1b").GPUs(1).Obj(),
		gt.MakeGPUPod("share-500b").Milli(500).Obj(),
		gt.MakeGPUPod("whole-2b").GPUs(2).Obj(),
	}
	// Each pod fits on two nodes or more: with one, kube-scheduler skips
	// scoring, and the service is not asked.
	for _, pod := range pods {
		createPod(ctx, t, c, pod)
		a := assignmentOf(ctx, t, c, pod.Name)
		d := lastDecision(t, decisions, "default/"+pod.Name)
		if !slices.Contains(d.Best, a.Node) {
			t.Errorf("%s bound to %s; the policy service scored best %v (scores %v)", pod.Name, a.Node, d.Best, d.Scores)
		}
	}
	if got := totalFallbacks(t) - fallbacksBefore; got != 0 {
		t.Errorf("%v fallbacks, want none", got)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}

// decision is one line of serve_linear.py's --decisions file: the pod, the
// nodes with the highest score, and every node's score.
type decision struct {
	Namespace string             `json:"namespace"`
	Pod       string             `json:"pod"`
	Best      []string           `json:"best"`
	Scores    map[string]float64 `json:"scores"`
}

// lastDecision is the service's last decision for pod.
func lastDecision(t *testing.T, path, pod string) decision {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the policy service's decisions: %v", err)
	}
	defer f.Close()
	var last *decision
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("decision %q: %v", sc.Text(), err)
		}
		if d.Namespace+"/"+d.Pod == pod {
			last = &d
		}
	}
	if last == nil {
		t.Fatalf("the policy service was never asked about %s", pod)
	}
	return *last
}

func totalFallbacks(t *testing.T) float64 {
	var sum float64
	for _, cause := range []string{"timeout", "error", "malformed", "circuit-open"} {
		sum += policyservicetest.Metric(t, "gpusched_external_policy_fallbacks_total", "cause", cause)
	}
	return sum
}

// waitForListener waits until something accepts connections on addr.
func waitForListener(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after %v: %v", addr, timeout, strings.TrimSpace(err.Error()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
