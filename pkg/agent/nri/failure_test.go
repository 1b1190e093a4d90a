package nri_test

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNRIStuckAgent: an agent that does not answer in time fails container
// creation (no container starts without its GPUs settled) but never a
// container's or a pod's stop: a stuck agent does not keep pods from
// terminating. The enforcing connection stays registered through the
// timeout (KeepConnected), so creation works again as soon as the agent
// answers; a creation the runtime failed while the agent was stuck holds
// its GPUs no longer than the agent's hold for unconfirmed creations.
func TestNRIStuckAgent(t *testing.T) {
	adaptation.SetPluginRequestTimeout(200 * time.Millisecond)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	r := startRuntime(t)
	p, _ := startAgent(t, r, agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, eightGPUs(t))
	p.SetUnconfirmedHold(300 * time.Millisecond)
	running := pod("ml", "running", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=0"})
	if _, err := r.create(running, container("r1")); err != nil {
		t.Fatal(err)
	}

	release := p.Hold()
	if _, err := r.create(pod("ml", "new", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=1"}), container("n1")); err == nil {
		t.Error("a container was created while the agent could not answer, want the request failed")
	}
	b := r.nri.BlockPluginSync()
	start := time.Now()
	_, err := r.nri.StopContainer(context.Background(), &api.StopContainerRequest{Pod: running, Container: r.ctrs["r1"]})
	b.Unblock()
	if err != nil {
		t.Errorf("stopping a container while the agent is stuck: %v, want the stop to go on without it", err)
	}
	if err := r.stopPod(running); err != nil {
		t.Errorf("stopping a pod while the agent is stuck: %v, want the stop to go on without it", err)
	}
	t.Logf("stops answered in %v with the agent stuck", time.Since(start).Round(time.Millisecond))
	release()
	time.Sleep(400 * time.Millisecond) // past the hold of the creation the runtime failed

	if !p.Ready() {
		t.Error("the enforcing connection was dropped after one timeout, want it kept")
	}
	if _, err := r.create(pod("ml", "after", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=1"}), container("n2")); err != nil {
		t.Errorf("creation after the agent answers again: %v", err)
	}
}
