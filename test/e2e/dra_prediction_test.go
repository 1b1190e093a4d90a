package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// Memory of the H100s in TestDRAPredictedAllocationRanksNodes, and what its
// claims consume of one: together they fill a GPU (32000 + 49000 ≤ 81559).
const (
	predictGPUMiB   = 81559
	predictHeldMiB  = 32000
	predictShareMiB = 49000
)

// predictArgs are GPUPlacement's args in TestDRAPredictedAllocationRanksNodes:
// FragFit with whole GPUs as the only typical pod, learning nothing, so that
// the fragment a placement leaves is what a whole-GPU pod could not use.
const predictArgs = `scoringStrategy:
  type: FragFit
fragmentation:
  halfLifePods: 0
  typicalPods:
  - {gpus: 1, milliGPU: 1000, milliCPU: 1000, weight: 1}
`

// predictConfig runs GPUPlacement with predictArgs beside the default
// plugins, DynamicResources among them: DRA allocates first fit. As in the
// shipped profiles, NodeResourcesFit and NodeResourcesBalancedAllocation do
// not score: they spread, preferring "b" (64 cores) by as much as
// GPUPlacement's best-fit term prefers "a" in
// TestDRADevicesArePolicyChoice (NodeResourcesFit 97 against 93,
// BalancedAllocation 74 against 73; GPUPlacement 99 against 100, weight
// 5): the two nodes' totals were equal (966 each) in the runs that placed
// the share on "b", a tie the scheduler breaks at random.
var predictConfig = `
profiles:
- schedulerName: gpusched
  plugins:
    score:
      disabled:
      - name: NodeResourcesFit
      - name: NodeResourcesBalancedAllocation
    multiPoint:
      enabled:
      - name: GPUPlacement
        weight: 5
    bind:
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: GPUPlacement
    args:
` + indent(predictArgs, "      ")

// chooseConfig is predictConfig with GPUDynamicResources in
// DynamicResources' place, as the example configuration has it: DRA
// allocates the devices GPUPlacement chooses.
var chooseConfig = strings.Replace(predictConfig, `
    bind:`, `
      - name: GPUDynamicResources
        weight: 2
      disabled:
      - name: DynamicResources
    bind:`, 1)

// The DRA cluster of TestDRAPredictedAllocationRanksNodes and
// TestDRADevicesArePolicyChoice. Two nodes publish two shareable H100s
// (consumable memory, KEP-5075); 32000 MiB of one GPU on each is held by a
// claim: GPU 1 on "a" (16 cores), GPU 0 on "b" (64 cores). A pod then
// claims a 49000 MiB share of any GPU. The typical pod is a whole GPU
// (predictArgs), and the levels below are FragFit's,
// int(100 × sigmoid((F_before − F_after)/1000)), F the free milli-GPU a
// whole-GPU pod could not use (the held GPU has 1000 − 393 = 607 free, the
// share is 601 milli-GPU).
//
// DRA's allocator takes the first device that fits: GPU 0 on both nodes.
// On "b" that fills the held GPU and keeps GPU 1 whole: F 607 → 6, level
// int(100 × sigmoid(0.601)) = 64. On "a" it splits the free whole GPU:
// F 607 → 1006 (no whole GPU left), level int(100 × sigmoid(−0.399)) = 40.
// So with first fit FragFit ranks "b" first.
// gpusched's own choice on "a" is GPU 1, which leaves the same whole GPU as
// on "b" (level 64 on both), and its best-fit term prefers "a", whose CPU
// is fuller: with its choice "a" wins. The premise is checked with the
// engine before the pod is created.

// TestDRAPredictedAllocationRanksNodes: with DynamicResources in the
// profile, a claim pod's nodes are ranked by the devices DRA's allocator
// will take (first fit), not by the devices gpusched would have chosen: the
// pod lands on "b".
func TestDRAPredictedAllocationRanksNodes(t *testing.T) {
	got := runPredictionCluster(t, predictConfig)
	if got.node != "b" || got.device != "gpu-0" {
		t.Errorf("share pod on %s with %s, want b with gpu-0: the node ranking did not follow DRA's first-fit allocation", got.node, got.device)
	}
}

// TestDRADevicesArePolicyChoice: with GPUDynamicResources in the profile,
// the claim gets the device gpusched's policy chooses, and the node is
// ranked by it: the pod lands on "a" with GPU 1, which DynamicResources'
// first fit would not give it there (GPU 0).
func TestDRADevicesArePolicyChoice(t *testing.T) {
	got := runPredictionCluster(t, chooseConfig)
	if got.node != "a" || got.device != "gpu-1" {
		t.Errorf("share pod on %s with %s, want a with gpu-1: the policy's choice", got.node, got.device)
	}
}

// sharePlacement is where the share pod landed and the device its claim got.
type sharePlacement struct{ node, device string }

// runPredictionCluster builds the cluster described above with the
// scheduler configuration config, places the holders and then the share
// pod, checks that no device is given beyond its memory, and returns where
// the share went.
func runPredictionCluster(t *testing.T, config string) sharePlacement {
	ctx := context.Background()
	c := testcluster.Start(t)
	held := map[string]int{"a": 1, "b": 0} // node → GPU whose memory a claim holds
	cpus := map[string]string{"a": "16", "b": "64"}
	slices := map[string]*resourceapi.ResourceSlice{}
	for _, node := range []string{"a", "b"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(node).CPU(cpus[node]).Obj())
		w := gt.MakeNVIDIASlice("gpu.nvidia.com-"+node, node)
		for i := range 2 {
			w.GPU(i, predictUUID(node, i), "NVIDIA H100 80GB HBM3", predictGPUMiB, fmt.Sprintf("pci0000:%02x", i))
		}
		slices[node] = w.Shared().Obj()
		createDRAObject(t, func() error {
			_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, slices[node], metav1.CreateOptions{})
			return err
		})
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, nvidiaGPUClass(), metav1.CreateOptions{})
		return err
	})

	checkPredictionPremise(t, slices, held, cpus)

	c.StartScheduler(ctx, t, config, plugins.CommandOptions()...)
	var holders []*v1.Pod
	for node, i := range held {
		name := "hold-" + node
		createShareClaim(ctx, t, c, name, predictHeldMiB, predictUUID(node, i))
		holders = append(holders, withClaim(gt.MakeGPUPod(name).CPU("1").Obj(), name))
	}
	for _, p := range holders {
		createPod(ctx, t, c, p)
	}
	waitBound(ctx, t, c, holders)

	createShareClaim(ctx, t, c, "share", predictShareMiB, "")
	pod := withClaim(gt.MakeGPUPod("share").CPU("1").Obj(), "share")
	createPod(ctx, t, c, pod)
	waitBound(ctx, t, c, []*v1.Pod{pod})
	assertDRAPlacement(ctx, t, c)
	got, err := c.Client.CoreV1().Pods("default").Get(ctx, "share", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, "share", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := sharePlacement{node: got.Spec.NodeName}
	if results := claim.Status.Allocation.Devices.Results; len(results) == 1 {
		out.device = results[0].Device
	}
	return out
}

// checkPredictionPremise asserts, with the engine, what the test relies on:
// the share's first-fit devices rank "b" above "a", and gpusched's own
// choice would rank "a" above "b".
func checkPredictionPremise(t *testing.T, slices map[string]*resourceapi.ResourceSlice, held map[string]int, cpus map[string]string) {
	t.Helper()
	args, err := load.GPUPlacementArgsFromYAML([]byte(predictArgs))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := args.NewPolicy()
	if err != nil {
		t.Fatal(err)
	}
	share := gpu.Demand{Count: 1, Milli: predictMilli(predictShareMiB), MemoryMiB: predictShareMiB, MilliCPU: 1000}
	firstFit, own := map[string]int64{}, map[string]int64{}
	for node, i := range held {
		inv, problems := gpu.InventoryFromSlices(node, []*resourceapi.ResourceSlice{slices[node]}, gpu.DRASource{Driver: gpu.DefaultDRADriver})
		if len(problems) > 0 {
			t.Fatalf("node %s: %v", node, problems)
		}
		alloc := &gpu.DRAAllocated{SharedMemoryMiB: map[gpu.DRADeviceID]int64{}}
		alloc.SharedMemoryMiB[gpu.DRADeviceID{Driver: gpu.DefaultDRADriver, Pool: node, Device: fmt.Sprintf("gpu-%d", i)}] = predictHeldMiB
		view := gpu.EmptyDRANodeGPUs(node, inv).WithDRA(inv, alloc)
		cpu := resource.MustParse(cpus[node])
		req := gpu.Request{Demand: &share, Host: gpu.Host{Known: true, FreeMilliCPU: cpu.MilliValue() - 1000, FreeMemoryMiB: 1 << 20, MaxMilliCPU: 64000, MaxGPUs: 2}}
		chosen, fit := gpu.PredictFirstFit(view, &share)
		if !fit.OK() {
			t.Fatalf("node %s: the share does not fit first fit: %v", node, fit.Reasons)
		}
		firstFit[node] = policy.Score(view, &req, chosen)
		chosen, fit = policy.Place(view, &req)
		if !fit.OK() {
			t.Fatalf("node %s: the share does not fit: %v", node, fit.Reasons)
		}
		own[node] = policy.Score(view, &req, chosen)
	}
	if firstFit["b"] <= firstFit["a"] {
		t.Fatalf("premise: first-fit scores a=%d b=%d, want b above a", firstFit["a"], firstFit["b"])
	}
	if own["a"] <= own["b"] {
		t.Fatalf("premise: scores of gpusched's own choice a=%d b=%d, want a above b", own["a"], own["b"])
	}
}

// predictMilli is the part of a test H100 that memoryMiB is, in
// milli-GPU, rounded up.
func predictMilli(memoryMiB int64) int64 {
	return (memoryMiB*gpu.MilliPerGPU + predictGPUMiB - 1) / predictGPUMiB
}

func predictUUID(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// createShareClaim creates a ResourceClaim for memoryMiB of one shareable
// GPU of gpu.nvidia.com; uuid, when set, selects the GPU.
func createShareClaim(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, memoryMiB int64, uuid string) {
	t.Helper()
	req := &resourceapi.ExactDeviceRequest{
		DeviceClassName: gpu.DefaultDRADriver,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(fmt.Sprintf("%dMi", memoryMiB)),
		}},
	}
	if uuid != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].uuid == '%s'", uuid)}}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}},
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
		return err
	})
}
