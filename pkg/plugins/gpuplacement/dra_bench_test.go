package gpuplacement_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// BenchmarkDRAClaimPod is one scheduling cycle of a pod with a one-GPU
// ResourceClaim on the scheduler_perf DRA workload's cluster (500 nodes, ten
// GPUs each, half of them allocated): "allocate" is the DynamicResources
// plugin's own work (an allocator, and an allocation per node), "gpusched"
// is what GPUPlacement adds (PreFilter, PreScore, Score on every node).
// Their ratio is GPUPlacement's cost for claim pods (docs/benchmarks.md).
func BenchmarkDRAClaimPod(b *testing.B) {
	const nodeCount, perNode = 500, 10
	var nodes []*v1.Node
	var slices []*resourceapi.ResourceSlice
	allocated := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
	for n := range nodeCount {
		name := fmt.Sprintf("node-%d", n)
		nodes = append(nodes, gt.MakeGPUNode(name).Obj())
		w := gt.MakeNVIDIASlice(name+"-slice", name)
		for i := range perNode {
			w.GPU(i, fmt.Sprintf("GPU-%d-%d", n, i), h100Product, 81559, fmt.Sprintf("pci0000:%02x", i%2))
			if i < perNode/2 {
				allocated.AllocatedDevices.Insert(structured.MakeDeviceID(gpu.DefaultDRADriver, name, fmt.Sprintf("gpu-%d", i)))
			}
		}
		slices = append(slices, w.Obj())
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: gpu.DefaultDRADriver}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}}}}
	claim := gpuClaim("one", 1)
	dra := &fakeDRA{slices: slices, gpuClass: class, allocated: allocated, claims: map[string]*resourceapi.ResourceClaim{"one": claim}}
	pod := gt.MakeGPUPod("p").Obj()
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("one")}}
	ctx := context.Background()

	b.Run("allocate", func(b *testing.B) {
		// Configured as the DynamicResources plugin configures its own.
		fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
		celCache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity, EnableListTypeAttributes: fts.EnableDRAListTypeAttributes})
		for b.Loop() {
			st, _ := dra.ResourceClaims().GatherAllocatedState()
			a, err := structured.NewAllocator(ctx, dynamicresources.AllocatorFeatures(fts), *st, dra, slices, celCache)
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range nodes {
				if _, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("gpusched", func(b *testing.B) {
		c := newClusterBinding(b, nil, nodes, nil, false, frameworkruntime.WithSharedDRAManager(dra))
		var infos []fwk.NodeInfo
		for _, n := range nodes {
			ni, _ := c.snapshot.NodeInfos().Get(n.Name)
			infos = append(infos, ni)
		}
		for b.Loop() {
			state := framework.NewCycleState()
			if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() && !status.IsSkip() {
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
