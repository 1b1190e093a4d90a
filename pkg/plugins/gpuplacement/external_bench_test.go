package gpuplacement_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
)

// BenchmarkExternalPolicyCycle is GPUPlacement's PreScore and Score for one
// whole-GPU pod over 500 eight-GPU nodes, a quarter of their GPUs taken:
// "FragFit" alone, and "External" asking a policy service on loopback that
// answers at once (its time to decode the request and answer included, as
// it runs in this process); "PairFit" alone, and "Model" scoring with the
// shipped learned model in-process, PairFit its fallback. Each ratio is the
// cost per cycle of scoring outside the policy (docs/benchmarks.md).
func BenchmarkExternalPolicyCycle(b *testing.B) {
	const nodeCount = 500
	var nodes []*v1.Node
	var pods []*v1.Pod
	for n := range nodeCount {
		name := fmt.Sprintf("node-%d", n)
		nodes = append(nodes, gt.MakeGPUNode(name).GFD(a100, 8, 81920).Obj())
		held := gt.MakeGPUPod("held-"+name).GPUs(2).Annotation(gpu.AnnotationAssigned, name+":0,1@1000").Obj()
		held.Spec.NodeName = name
		pods = append(pods, held)
	}
	srv := policyservicetest.Start(b, policyservicetest.Prefer("node-7"))
	whole, share := gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUPod("s").Milli(250).Obj()
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	model := filepath.Join(filepath.Dir(file), "..", "..", "..", "python", "examples", "learned_model.json")
	for _, tc := range []struct{ name, yaml string }{
		{"FragFit", "scoringStrategy:\n  type: FragFit\n"},
		{"External", fmt.Sprintf("scoringStrategy:\n  type: External\nexternal:\n  endpoint: %q\n  fallback: FragFit\n  timeout: 1s\n", srv.Addr)},
		{"PairFit", "scoringStrategy:\n  type: PairFit\n"},
		{"Model", fmt.Sprintf("scoringStrategy:\n  type: External\nexternal:\n  model: %q\n  fallback: PairFit\n", model)},
	} {
		for _, pod := range []*v1.Pod{whole, share} {
			name := tc.name
			if pod == share {
				name += "-share"
			}
			b.Run(name, func(b *testing.B) {
				args, err := load.GPUPlacementArgsFromYAML([]byte(tc.yaml))
				if err != nil {
					b.Fatal(err)
				}
				c := newClusterBinding(b, args, nodes, pods, false)
				infos, _ := c.snapshot.NodeInfos().List()
				for b.Loop() {
					state := framework.NewCycleState()
					if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
						b.Fatal(status)
					}
					if status := c.fw.RunPreScorePlugins(ctx, state, pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
					if _, status := c.fw.RunScorePlugins(ctx, state, pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
				}
			})
		}
	}
}
