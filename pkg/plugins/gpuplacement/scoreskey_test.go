package gpuplacement_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
)

// TestNodeLocalScores: after PreScore the built-in policy's scores are
// node-local, with the same key in two cycles of an unchanged cluster;
// they are not under the External strategy (the service's scores), on a
// cluster with DRA GPUs (the devices DRA allocates), or before PreScore.
func TestNodeLocalScores(t *testing.T) {
	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	nodes, pods := externalNodes()
	builtin := newCluster(t, nil, nodes, pods)
	key, ok := preScoredKey(t, builtin, pod)
	if !ok {
		t.Fatal("the built-in policy's scores are not node-local")
	}
	if again, ok := preScoredKey(t, builtin, pod); !ok || again != key {
		t.Errorf("the next cycle's key %v (node-local %v), want %v", again, ok, key)
	}
	if _, ok := gpuplacement.NodeLocalScores(framework.NewCycleState()); ok {
		t.Error("node-local before PreScore ran")
	}

	srv := policyservicetest.Start(t, policyservicetest.Prefer("t4"))
	if _, ok := preScoredKey(t, newCluster(t, externalArgs(t, srv.Addr, ""), nodes, pods), pod); ok {
		t.Error("the External strategy's scores are node-local")
	}

	_, slices := draNodes()
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	if _, ok := preScoredKey(t, newDRACluster(t, args, &fakeDRA{slices: slices, gpuClass: gpuClass}), gt.MakeGPUPod("p").GPUs(1).Obj()); ok {
		t.Error("scores on a cluster with DRA GPUs are node-local")
	}
}

// preScoredKey runs PreFilter and PreScore for pod over every node and
// returns NodeLocalScores.
func preScoredKey(t *testing.T, c *testCluster, pod *v1.Pod) (gpuplacement.ScoresKey, bool) {
	t.Helper()
	ctx, state := context.Background(), framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	nodes, _ := c.snapshot.NodeInfos().List()
	if status := c.fw.RunPreScorePlugins(ctx, state, pod, nodes); !status.IsSuccess() {
		t.Fatal(status)
	}
	return gpuplacement.NodeLocalScores(state)
}
