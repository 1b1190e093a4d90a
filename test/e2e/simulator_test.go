package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/simulator"
	"github.com/gpusched/gpusched/test/testcluster"
)

// fragFitConfig runs FragFit as the only scorer, with a fixed distribution of
// pod shapes, so that the live scheduler and the simulator measure the same.
const fragFitConfig = `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
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
        weight: 1
    bind:
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: ["nvidia.com/gpu"]
  - name: GPUPlacement
    args:
      scoringStrategy:
        type: FragFit
      fragmentation:
        halfLifePods: 0
        typicalPods:
        - {milliCPU: 4000, gpus: 1, weight: 4}
        - {milliCPU: 2000, gpus: 1, milliGPU: 500, weight: 3}
        - {milliCPU: 2000, gpus: 1, milliGPU: 250, weight: 2}
        - {milliCPU: 8000, gpus: 0, weight: 1}
`

// TestLiveSchedulerMatchesSimulator places the same pods in the same order
// with the live scheduler (API server, informers, binding) and with the
// simulator, from the same configuration, and expects the same node and GPUs
// for every pod. The nodes differ in CPU and GPUs, so that FragFit's best-fit
// term leaves no two nodes equal and no tie-break decides.
func TestLiveSchedulerMatchesSimulator(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).CPU("53").Obj(),
		gt.MakeGPUNode("a100-1").GFD(a100, 4, 81920).CPU("41").Obj(),
		gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).CPU("29").Obj(),
		gt.MakeGPUNode("t4-1").GFD(t4, 2, 15360).CPU("17").Obj(),
	}
	var pods []*v1.Pod
	for i, spec := range []struct {
		gpus  int
		milli int64
		cpu   string
	}{
		{1, 0, "4"}, {0, 500, "2"}, {0, 250, "2"}, {2, 0, "8"}, {0, 0, "8"}, {0, 500, "2"},
		{1, 0, "4"}, {0, 750, "3"}, {4, 0, "16"}, {0, 250, "1"}, {0, 0, "6"}, {1, 0, "4"},
		{0, 500, "2"}, {0, 250, "2"}, {2, 0, "6"}, {0, 100, "1"},
	} {
		p := gt.MakeGPUPod(fmt.Sprintf("pod-%02d", i)).CPU(spec.cpu)
		switch {
		case spec.gpus > 0:
			p = p.GPUs(spec.gpus)
		case spec.milli > 0:
			p = p.Milli(spec.milli)
		}
		pods = append(pods, p.Obj())
	}

	// The live scheduler, one pod at a time.
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, n := range nodes {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	c.StartScheduler(ctx, t, fragFitConfig, plugins.CommandOptions()...)
	live := map[string]string{}
	for _, p := range pods {
		createPod(ctx, t, c, p)
		bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", p.Name, timeout)
		live[p.Name] = bound.Spec.NodeName
		if a, err := gpuAssignment(bound); err == nil {
			live[p.Name] += fmt.Sprint(a)
		}
	}

	// The simulator, from the same configuration file.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(fragFitConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := simulator.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := simulator.ProfilesFor(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	trace := make([]simulator.TracePod, len(pods))
	for i, p := range pods {
		trace[i] = simulator.TracePod{Pod: p, Created: int64(i), Deleted: 1 << 40, HasTimes: true}
	}
	runs, err := simulator.Simulate(ctx, simulator.Options{Nodes: nodes, Pods: trace, Profiles: profiles,
		Seeds: []int64{1}, Arrival: simulator.ArrivalReplay, RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	nodesUsed := map[string]bool{}
	for _, p := range runs[0].Placements {
		got := p.Node
		if p.GPUs != nil {
			got += fmt.Sprint(p.GPUs)
		}
		if got != live[p.Pod] {
			t.Errorf("%s: simulator placed it on %q, the live scheduler on %q", p.Pod, got, live[p.Pod])
		}
		nodesUsed[p.Node] = true
		t.Logf("%s → %s", p.Pod, got)
	}
	if len(runs[0].Placements) != len(pods) || len(nodesUsed) < 2 {
		t.Errorf("simulated %d placements on %d nodes; want all %d pods, spread over more than one node", len(runs[0].Placements), len(nodesUsed), len(pods))
	}
}

// gpuAssignment is the device list of a bound pod's assignment.
func gpuAssignment(pod *v1.Pod) ([]int, error) {
	raw, ok := pod.Annotations[gpu.AnnotationAssigned]
	if !ok {
		return nil, fmt.Errorf("pod %s has no assignment", pod.Name)
	}
	a, err := gpu.ParseAssignment(raw)
	if err != nil {
		return nil, err
	}
	return slices.Clone(a.Devices), nil
}
