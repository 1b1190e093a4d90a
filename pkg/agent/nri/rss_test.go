package nri_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestAgentRSS measures the agent binary's memory with 110 pods on the node:
// it runs $GPUSCHED_AGENT_BINARY on a mock DGX H100 against this test's NRI
// runtime, creates one container for each of 110 pods (7 whole-GPU pods, 14
// shares of GPU 7, 89 pods without GPUs), and reports the process's resident memory.
// Skipped unless the variable names a built agent:
//
//	go build -o /tmp/gpusched-agent ./cmd/gpusched-agent
//	GPUSCHED_AGENT_BINARY=/tmp/gpusched-agent go test -run TestAgentRSS -v ./pkg/agent/nri/
func TestAgentRSS(t *testing.T) {
	bin := os.Getenv("GPUSCHED_AGENT_BINARY")
	if bin == "" {
		t.Skip("GPUSCHED_AGENT_BINARY is not set")
	}
	r := startRuntime(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// An API server nobody listens on: publishing fails and is retried, which
	// the measurement includes.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--node-name="+thisNode, "--nvml-mock=dgxh100", "--kubeconfig="+kubeconfig,
		"--nri-socket="+r.socket, "--device-plugin=false", "--metrics-address=", "--interval=1s", "-v=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Wait until the agent has registered: a pod without GPUs gets "void".
	deadline := time.Now().Add(30 * time.Second)
	for {
		adj, err := r.create(pod("probe", "probe", nil), container("probe"))
		if err == nil && len(adj.GetEnv()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not register with the runtime within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	uuid := func(i int) string { return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012x", i) }
	for i := range 110 {
		var annotations map[string]string
		switch {
		case i < 7:
			annotations = map[string]string{gpu.AnnotationAssigned: fmt.Sprintf("node=%s;gpus=%d;uuids=%s", thisNode, i, uuid(i))}
		case i < 21:
			annotations = map[string]string{gpu.AnnotationMilli: "50", gpu.AnnotationAssigned: fmt.Sprintf("node=%s;gpus=7;milli=50", thisNode)}
		}
		if _, err := r.create(pod("ml", fmt.Sprintf("p%d", i), annotations), container(fmt.Sprintf("c%d", i), "NVIDIA_VISIBLE_DEVICES=all")); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	time.Sleep(2 * time.Second) // a couple of rediscovery rounds
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "VmHWM") {
			t.Log(strings.Join(strings.Fields(line), " "))
		}
	}
}
