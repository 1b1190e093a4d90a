package gpuplacement_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/policyservice"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
)

// TestExternalFeaturesAsFresh: the features the External strategy sends,
// which the plugin keeps from cycle to cycle for the nodes that did not
// change, are row for row, bit for bit, the features described afresh
// (gpuplacement.Features), through 150 pods of four shapes in turn placed
// one by one on twelve nodes of two models, nodes filling until the pod no
// longer fits, the typical pods the policy learns changing as it sees
// pods, and a node of more CPU than any other joining (which changes
// every node's CPU as a fraction of the largest).
func TestExternalFeaturesAsFresh(t *testing.T) {
	srv := policyservicetest.Start(t, policyservicetest.Prefer("none"))
	var nodes []*v1.Node
	for i := range 12 {
		model, memory := a100, int64(81920)
		if i%3 == 2 {
			model, memory = t4, 15360
		}
		nodes = append(nodes, gt.MakeGPUNode(fmt.Sprintf("node-%02d", i)).GFD(model, 8, memory).Obj())
	}
	args := externalArgs(t, srv.Addr, "  timeout: 2s\nfragmentation:\n  halfLifePods: 16\n  typicalPods:\n  - {gpus: 1, milliGPU: 1000, weight: 1}\n")
	c := newCluster(t, args, nodes, nil)
	shapes := []func(string) *v1.Pod{
		func(n string) *v1.Pod { return gt.MakeGPUPod(n).GPUs(1).Obj() },
		func(n string) *v1.Pod { return gt.MakeGPUPod(n).Milli(250).Obj() },
		func(n string) *v1.Pod { return gt.MakeGPUPod(n).Milli(500).Obj() },
		func(n string) *v1.Pod { return gt.MakeGPUPod(n).GPUs(2).Obj() },
	}
	ctx := context.Background()
	typicals := map[*gpu.TypicalPod]bool{}
	compared := 0
	for i := range 150 {
		pod := shapes[i%len(shapes)](fmt.Sprintf("pod-%03d", i))
		if i == 100 {
			c.cache.AddNode(c.logger, gt.MakeGPUNode("large").GFD(a100, 8, 81920).CPU("512").Obj())
		}
		c.refresh(t)
		state := framework.NewCycleState()
		if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
			t.Fatal(status)
		}
		typicals[unsafe.SliceData(c.plugin.TypicalPods())] = true
		all, _ := c.snapshot.NodeInfos().List()
		var feasible []fwk.NodeInfo
		for _, ni := range all {
			if c.fw.RunFilterPlugins(ctx, state, pod, ni).IsSuccess() {
				feasible = append(feasible, ni)
			}
		}
		if len(feasible) < 2 {
			continue // a single feasible node is not scored
		}
		if status := c.fw.RunPreScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
			t.Fatal(status)
		}
		demand, _ := c.plugin.Demand(state)
		fresh, err := gpuplacement.Features(state, feasible, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, got := policyservice.Matrix(fresh, demand, nil), srv.Last()
		width := 4 * len(want.Columns)
		at := map[string]int{}
		for k, n := range got.Nodes {
			at[n.Name] = k
		}
		for j := range fresh {
			k, ok := at[fresh[j].Name]
			if !ok || len(got.Nodes) != len(fresh) {
				t.Fatalf("pod %s: the service was sent %d nodes, want %d with %s", pod.Name, len(got.Nodes), len(fresh), fresh[j].Name)
			}
			if g, w := got.Features.Values[k*width:(k+1)*width], want.Values[j*width:(j+1)*width]; !bytes.Equal(g, w) {
				t.Errorf("pod %s: node %s's row was sent as %v, described afresh %v", pod.Name, fresh[j].Name, g, w)
			}
		}
		compared++
		// Place the pod on a node that turns with the pods, so that a
		// different node changes each time.
		c.schedule(t, pod, feasible[i%len(feasible)].Node().Name)
	}
	if compared < 100 || len(typicals) < 2 {
		t.Errorf("%d cycles compared, %d sets of typical pods seen: want at least 100 cycles and a change of the typical pods", compared, len(typicals))
	}
}
