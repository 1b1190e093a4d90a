package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/simulator"
	"github.com/gpusched/gpusched/pkg/trace"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestExampleConfigsLoad: every configuration under examples/ starts the
// gpusched scheduler the way cmd/gpusched and the playground's control
// plane start it (app.Setup with pkg/plugins' registry), and runs in the
// simulator, which registers the same plugins: a configuration a user can
// run in one front end runs in the others.
func TestExampleConfigsLoad(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(repoRoot(), "examples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The Workload API example needs its feature gate, which is process-wide
	// here, on the API server and the in-process scheduler alike.
	c := testcluster.Start(t, "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true")
	installPodGroupCRD(ctx, t, c) // for the gang example's GPUGang
	nodes := []*v1.Node{gt.MakeGPUNode("gpu-0").GFD(a100, 8, 81920).Obj()}
	workload := []trace.Pod{
		{Pod: gt.MakeGPUPod("whole").GPUs(2).CPU("4").Obj(), Created: 0, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: gt.MakeGPUPod("share").Milli(300).CPU("1").Obj(), Created: 1, Deleted: trace.NeverDeleted, HasTimes: true},
	}
	var tried int
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		tried++
		path := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(e.Name()+"/scheduler", func(t *testing.T) {
			s := c.StartScheduler(ctx, t, string(raw), plugins.CommandOptions()...)
			s.Stop()
		})
		t.Run(e.Name()+"/simulator", func(t *testing.T) {
			cfg, err := simulator.LoadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			profiles, err := simulator.ProfilesFor(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs, err := simulator.Simulate(ctx, simulator.Options{Nodes: nodes, Pods: workload, Profiles: profiles,
				Seeds: []int64{1}, Arrival: trace.ArrivalReplay, RecordPlacements: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, run := range runs {
				if run.Placed != len(workload) {
					t.Errorf("profile %s placed %d of %d pods: %v", run.Policy, run.Placed, len(workload), run.FailureReasons)
				}
			}
		})
	}
	if tried < 4 {
		t.Errorf("found %d example configurations, want the 4 or more in examples/", tried)
	}
}
