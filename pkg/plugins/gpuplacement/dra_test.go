package gpuplacement_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
)

const h100Product = "NVIDIA H100 80GB HBM3"

// fakeDRA is an in-memory fwk.SharedDRAManager: slices, an allocated
// state, and whether a DeviceClass maps nvidia.com/gpu.
type fakeDRA struct {
	claims map[string]*resourceapi.ResourceClaim
	// listed is what the tracker lists: the allocated claims.
	listed    []*resourceapi.ResourceClaim
	slices    []*resourceapi.ResourceSlice
	allocated structured.AllocatedState
	gpuClass  *resourceapi.DeviceClass
	// pending are the allocations in flight (Reserve to PreBind), by claim.
	pending map[types.UID]*resourceapi.AllocationResult
}

func (f *fakeDRA) ResourceClaims() fwk.ResourceClaimTracker     { return fakeClaims{f} }
func (f *fakeDRA) ResourceSlices() fwk.ResourceSliceLister      { return f }
func (f *fakeDRA) DeviceClasses() fwk.DeviceClassLister         { return f }
func (f *fakeDRA) DeviceClassResolver() fwk.DeviceClassResolver { return f }
func (f *fakeDRA) List() ([]*resourceapi.DeviceClass, error)    { return nil, nil }
func (f *fakeDRA) Get(string) (*resourceapi.DeviceClass, error) { return f.gpuClass, nil }
func (f *fakeDRA) GetDeviceClass(r v1.ResourceName) *resourceapi.DeviceClass {
	if r == gpu.ResourceGPU {
		return f.gpuClass
	}
	return nil
}
func (f *fakeDRA) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return f.slices, nil
}

// fakeClaims serves the allocated state; the rest of the tracker is unused.
type fakeClaims struct{ f *fakeDRA }

func (c fakeClaims) List() ([]*resourceapi.ResourceClaim, error) { return c.f.listed, nil }
func (c fakeClaims) Get(_, name string) (*resourceapi.ResourceClaim, error) {
	if claim, ok := c.f.claims[name]; ok {
		return claim, nil
	}
	return nil, fmt.Errorf("claim %s not found", name)
}
func (c fakeClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	return c.f.allocated.AllocatedDevices, nil
}
func (c fakeClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	return &c.f.allocated, nil
}
func (c fakeClaims) SignalClaimPendingAllocation(types.UID, *resourceapi.ResourceClaim) error {
	return nil
}
func (c fakeClaims) GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	return c.f.pending[uid]
}
func (c fakeClaims) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool   { return false }
func (c fakeClaims) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error { return nil }
func (c fakeClaims) AssumedClaimRestore(string, string)                       {}

var gpuClass = &resourceapi.DeviceClass{
	ObjectMeta: metav1.ObjectMeta{Name: gpu.DefaultDRADriver},
	Spec:       resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To(string(gpu.ResourceGPU))},
}

// draNodes: "dra" publishes 4 H100s in a slice and has no allocatable
// nvidia.com/gpu; "dp" is a device-plugin node (GFD, 4 A100s); "dual"
// publishes both ways.
func draNodes() ([]*v1.Node, []*resourceapi.ResourceSlice) {
	slice := func(node string) *resourceapi.ResourceSlice {
		w := gt.MakeNVIDIASlice("slice-"+node, node)
		for i := range 4 {
			w.GPU(i, "GPU-"+node+"-"+string(rune('0'+i)), h100Product, 81559, "")
		}
		return w.Obj()
	}
	return []*v1.Node{
			gt.MakeGPUNode("dra").Obj(),
			gt.MakeGPUNode("dp").GFD(a100, 4, 81920).Obj(),
			gt.MakeGPUNode("dual").GFD(a100, 4, 81920).Obj(),
		}, []*resourceapi.ResourceSlice{
			slice("dra"), slice("dual"),
			gt.MakeNVIDIASlice("other-driver", "dp").Driver("gpu.example.com").GPU(0, "GPU-X", h100Product, 81559, "").Obj(),
		}
}

func newDRACluster(t *testing.T, args *config.GPUPlacementArgs, dra *fakeDRA) *testCluster {
	nodes, _ := draNodes()
	return newClusterBinding(t, args, nodes, nil, false, frameworkruntime.WithSharedDRAManager(dra))
}

func TestDRAFilter(t *testing.T) {
	_, slices := draNodes()
	const (
		ok         = "Success: "
		draManaged = "UnschedulableAndUnresolvable: node GPUs allocated by DRA"
		noGPUs     = "UnschedulableAndUnresolvable: node has no GPUs"
	)
	enabled := func(driver string) *config.GPUPlacementArgs {
		a := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}}}
		a.DRA = config.DRA{Enabled: driver != "", Driver: driver}
		return a
	}
	tests := []struct {
		name string
		args *config.GPUPlacementArgs
		dra  *fakeDRA
		pod  *v1.Pod
		want map[string]string
	}{{
		name: "whole GPUs: deferred to DRA on the DRA node, refused on the node that publishes both ways",
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").GPUs(2).Obj(),
		want: map[string]string{"dra": ok, "dp": ok, "dual": draManaged},
	}, {
		name: "a share: only the device-plugin node",
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").Milli(500).Obj(),
		want: map[string]string{"dra": draManaged, "dp": ok, "dual": draManaged},
	}, {
		name: "a model list DRA's choice cannot keep",
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").GPUs(1).Models(a100).Obj(),
		want: map[string]string{"dra": "UnschedulableAndUnresolvable: GPU model not allowed", "dp": ok},
	}, {
		name: "a model list every GPU of the node meets",
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").GPUs(1).Models("NVIDIA-H100-80GB-HBM3").Obj(),
		want: map[string]string{"dra": ok},
	}, {
		name: "no DeviceClass maps nvidia.com/gpu: DRA does not serve it",
		dra:  &fakeDRA{slices: slices},
		pod:  gt.MakeGPUPod("p").GPUs(1).Obj(),
		want: map[string]string{"dra": draManaged, "dp": ok, "dual": draManaged},
	}, {
		name: "DRA disabled in args: slices are not read",
		args: enabled(""),
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").GPUs(1).Obj(),
		want: map[string]string{"dra": noGPUs, "dp": ok, "dual": ok},
	}, {
		name: "another driver configured: its slices are the DRA ones",
		args: enabled("gpu.example.com"),
		dra:  &fakeDRA{slices: slices, gpuClass: gpuClass},
		pod:  gt.MakeGPUPod("p").Milli(100).Obj(),
		want: map[string]string{"dra": noGPUs, "dp": draManaged, "dual": ok},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status := filter(t, newDRACluster(t, tt.args, tt.dra), tt.pod)
			if status != nil {
				t.Fatalf("PreFilter: %v", status)
			}
			for node, want := range tt.want {
				if got[node] != want {
					t.Errorf("node %s: %q, want %q", node, got[node], want)
				}
			}
		})
	}
}

// TestDRAWithoutManager: a framework without a DRA manager behaves as
// before: the slices are invisible and the DRA node has no GPUs.
func TestDRAWithoutManager(t *testing.T) {
	nodes, _ := draNodes()
	got, status := filter(t, newCluster(t, nil, nodes, nil), gt.MakeGPUPod("p").GPUs(1).Obj())
	if status != nil || got["dra"] != "UnschedulableAndUnresolvable: node has no GPUs" || got["dual"] != "Success: " {
		t.Errorf("status %v, filter %v", status, got)
	}
}

// TestDRAResourceClaimAllocationsScore: devices allocated to claims (and
// claims in flight, which the tracker's state includes) are taken in the
// view the policy scores, and the score is that of DRA's first-fit pick.
//
// BestFit with GPU weight 1 scores 1e6 × used milli-GPU after placement /
// node capacity. Node "dra" has gpu-0 and gpu-1 allocated: 1e6 × 3000/4000
// = 750000; node "dual" is refused; "dp" has nothing: 1e6 × 1000/4000 =
// 250000. Min-max to 0..100: dra 100, dp 0.
func TestDRAResourceClaimAllocationsScore(t *testing.T) {
	_, slices := draNodes()
	dra := &fakeDRA{slices: slices, gpuClass: gpuClass, allocated: structured.AllocatedState{
		AllocatedDevices: sets.New(
			structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-0"),
			structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-1"),
			structured.MakeDeviceID("gpu.example.com", "dp", "gpu-0")),
	}}
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	c := newDRACluster(t, args, dra)
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	ctx, state := context.Background(), framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	var feasible []fwk.NodeInfo
	for _, name := range []string{"dra", "dp"} {
		ni, _ := c.snapshot.NodeInfos().Get(name)
		feasible = append(feasible, ni)
	}
	if status := c.fw.RunPreScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
		t.Fatal(status)
	}
	scores, status := c.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	want := map[string]int64{"dra": 100, "dp": 0}
	for _, s := range scores {
		if s.TotalScore != want[s.Name] {
			t.Errorf("node %s: score %d, want %d", s.Name, s.TotalScore, want[s.Name])
		}
	}

	// With all four allocated, DRA has nothing left on the node: the
	// prediction fails and the node scores nothing (DynamicResources' Filter
	// rejects it). The allocated state changes in place, so the node's view
	// of the first cycle must not be handed out again.
	for i := 2; i < 4; i++ {
		dra.allocated.AllocatedDevices.Insert(structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-"+string(rune('0'+i))))
	}
	dra.allocated.AggregatedCapacity = structured.ConsumedCapacityCollection{}
	state = framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	scores, _ = c.fw.RunScorePlugins(ctx, state, pod, feasible)
	for _, s := range scores {
		if s.Name == "dra" && s.TotalScore != 0 {
			t.Errorf("full DRA node scores %d, want 0", s.TotalScore)
		}
	}
}

// TestDRAReserveWritesNoAssignment: a pod deferred to DRA is reserved and
// bound with no gpusched.io/gpu-assigned annotation.
func TestDRAReserveWritesNoAssignment(t *testing.T) {
	_, slices := draNodes()
	c := newDRACluster(t, nil, &fakeDRA{slices: slices, gpuClass: gpuClass})
	state, got := c.schedule(t, gt.MakeGPUPod("p").GPUs(2).Obj(), "dra")
	if got != "" {
		t.Errorf("annotation %q written for a pod DRA serves", got)
	}
	if a, ok := gpuplacement.AssignmentFrom(state); ok {
		t.Errorf("assignment %s reserved for a pod DRA serves", a.String())
	}
}

// TestDRAResourceSliceProblemEvent: what the plugin cannot read in a slice
// is reported in a Warning event on the slice, once per slice version.
func TestDRAResourceSliceProblemEvent(t *testing.T) {
	_, slices := draNodes()
	slices[0].Spec.Devices[1].Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("-1")}
	c := newDRACluster(t, nil, &fakeDRA{slices: slices, gpuClass: gpuClass})
	for range 2 {
		if _, status := filter(t, c, gt.MakeGPUPod("p").GPUs(1).Obj()); status != nil {
			t.Fatal(status)
		}
	}
	var invalid, twice []string
	for len(c.recorder.Events) > 0 {
		switch ev := <-c.recorder.Events; {
		case strings.Contains(ev, "InvalidGPUDevices"):
			invalid = append(invalid, ev)
		case strings.Contains(ev, "GPUsPublishedTwice"):
			twice = append(twice, ev)
		default:
			t.Errorf("unexpected event %q", ev)
		}
	}
	if len(invalid) != 1 || !strings.Contains(invalid[0], "spec.devices[gpu-1].capacity[memory]") {
		t.Errorf("InvalidGPUDevices events %q, want one naming the field", invalid)
	}
	// The node "dual" has allocatable nvidia.com/gpu and DRA GPUs: reported
	// once, though filtered twice.
	if len(twice) != 1 {
		t.Errorf("GPUsPublishedTwice events %q, want one", twice)
	}
}

// gpuClaim is a ResourceClaim for count whole GPUs of class gpu.nvidia.com.
func gpuClaim(name string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: gpu.DefaultDRADriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}
}

// claimPod is a pod using the named ResourceClaim.
func claimPod(name, claim string) *v1.Pod {
	pod := gt.MakeGPUPod(name).Obj()
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// TestDRAResourceClaimPrediction: a pod with a ResourceClaim of its own is
// scored on the devices the structured allocator gives the claim on each
// node, in the view with DRA's allocations taken; Filter leaves it to
// DynamicResources.
//
// BestFit with GPU weight 1 scores 1e6 × used milli-GPU after placement /
// node capacity: "dra" (gpu-0 and gpu-1 allocated; the allocator takes
// gpu-2) 1e6 × 3000/4000 = 750000; "dual" (gpu-3 allocated; it takes gpu-0)
// 1e6 × 2000/4000 = 500000; "dp" publishes no DRA GPUs: 0. Min-max to
// 0..100: 100, 500000×100/750000 = 66, 0.
func TestDRAResourceClaimPrediction(t *testing.T) {
	_, slices := draNodes()
	dra := &fakeDRA{slices: slices, gpuClass: gpuClass,
		claims: map[string]*resourceapi.ResourceClaim{"one": gpuClaim("one", 1)},
		allocated: structured.AllocatedState{AllocatedDevices: sets.New(
			structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-0"),
			structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-1"),
			structured.MakeDeviceID(gpu.DefaultDRADriver, "dual", "gpu-3"))},
	}
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	c := newDRACluster(t, args, dra)
	pod := claimPod("p", "one")

	got, status := filter(t, c, pod)
	if status != nil || got["dra"] != "Success: " || got["dual"] != "Success: " || got["dp"] != "Success: " {
		t.Fatalf("filter: %v %v", status, got)
	}
	scores := scoreAll(t, c, pod)
	if want := map[string]int64{"dra": 100, "dual": 66, "dp": 0}; !equalScores(scores, want) {
		t.Errorf("scores %v, want %v", scores, want)
	}

	// Once the claim is allocated there is nothing to predict: every node
	// scores alike (min-max gives equal scores the top).
	allocated := gpuClaim("one", 1)
	allocated.Status.Allocation = &resourceapi.AllocationResult{}
	dra.claims["one"] = allocated
	if want := map[string]int64{"dra": 100, "dual": 100, "dp": 100}; !equalScores(scoreAll(t, c, pod), want) {
		t.Errorf("allocated claim: scores %v, want %v", scoreAll(t, c, pod), want)
	}
}

// scoreAll runs PreFilter, PreScore and Score for pod over every node.
func scoreAll(t *testing.T, c *testCluster, pod *v1.Pod) map[string]int64 {
	t.Helper()
	ctx, state := context.Background(), framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	nodeInfos, _ := c.snapshot.NodeInfos().List()
	if status := c.fw.RunPreScorePlugins(ctx, state, pod, nodeInfos); !status.IsSuccess() {
		t.Fatal(status)
	}
	scores, status := c.fw.RunScorePlugins(ctx, state, pod, nodeInfos)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	out := map[string]int64{}
	for _, s := range scores {
		out[s.Name] = s.TotalScore
	}
	return out
}

func equalScores(got, want map[string]int64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestDRADeferredPredictionFollowsTheClass: whole GPUs deferred to DRA are
// predicted by allocating the claim DynamicResources makes for them, so the
// DeviceClass's selectors count. The class that maps nvidia.com/gpu here
// takes only gpu-2 and gpu-3 of node "dra", and gpu-2 is allocated: a pod
// asking for two GPUs cannot get them there, though two other GPUs of the
// node are free. "dra" scores 0, "dp" (device plugin, 4 free A100s) the
// most, 100 after min-max (Filter would reject "dual", which publishes both
// ways; scored anyway, it has no GPU of the class: 0). First fit over the node's free GPUs (gpu-0 and
// gpu-1) would have scored "dra" the fuller node under BestFit.
func TestDRADeferredPredictionFollowsTheClass(t *testing.T) {
	_, slices := draNodes()
	class := gpuClass.DeepCopy()
	class.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: "device.attributes['gpu.nvidia.com'].uuid in ['GPU-dra-2', 'GPU-dra-3']"}}}
	dra := &fakeDRA{slices: slices, gpuClass: class, allocated: structured.AllocatedState{
		AllocatedDevices: sets.New(structured.MakeDeviceID(gpu.DefaultDRADriver, "dra", "gpu-2")),
	}}
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	c := newDRACluster(t, args, dra)
	pod := gt.MakeGPUPod("p").GPUs(2).Obj()
	// "dual" publishes both ways and none of its GPUs is of the class: 0.
	if want := map[string]int64{"dra": 0, "dp": 100, "dual": 0}; !equalScores(scoreAll(t, c, pod), want) {
		t.Errorf("scores %v, want %v", scoreAll(t, c, pod), want)
	}
}

// TestDRANeverTwice: a node's GPUs are handed out either by annotation or by
// DRA claims, never both, also around the edges of the DRA-managed rule.
//
//   - "upgrading" has a device plugin (4 A100s) and no slices now: its DRA
//     driver is being upgraded, and a claim allocated before still holds
//     gpu-0 there. An annotation pod is refused there while the claim names
//     the node, and accepted once no claim does.
//   - "dra" publishes 4 H100s; a pod there holds gpu-0 by annotation (placed
//     before the driver published). A pod with a claim for GPUs of the
//     driver, and a pod whose nvidia.com/gpu DRA serves there, are refused
//     there while that pod is on the node, and accepted when it is on "dp"
//     instead; "dp" (a device-plugin node) takes the claim pod either way.
func TestDRANeverTwice(t *testing.T) {
	const (
		ok         = "Success: "
		draManaged = "UnschedulableAndUnresolvable: node GPUs allocated by DRA"
		waits      = "Unschedulable: " + gpuplacement.ReasonAnnotationHolders
	)
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	t.Run("a node whose slices are gone while a claim holds its GPUs", func(t *testing.T) {
		holding := gpuClaim("held", 1)
		holding.UID = "uid-held"
		holding.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpus", Driver: gpu.DefaultDRADriver, Pool: "upgrading", Device: "gpu-0"}}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"upgrading"}}}}}},
		}
		// The same claim between Reserve and PreBind: its allocation is the
		// tracker's, not yet in its status.
		inFlight := holding.DeepCopy()
		inFlight.Status.Allocation = nil
		nodes := []*v1.Node{gt.MakeGPUNode("upgrading").GFD(a100, 4, 81920).Obj(), gt.MakeGPUNode("dp").GFD(a100, 4, 81920).Obj()}
		for _, tt := range []struct {
			name    string
			listed  []*resourceapi.ResourceClaim
			pending map[types.UID]*resourceapi.AllocationResult
			want    string
		}{
			{name: "the claim holds gpu-0", listed: []*resourceapi.ResourceClaim{holding}, want: draManaged},
			{name: "the claim's allocation of gpu-0 is in flight", listed: []*resourceapi.ResourceClaim{inFlight},
				pending: map[types.UID]*resourceapi.AllocationResult{inFlight.UID: holding.Status.Allocation}, want: draManaged},
			{name: "no claim names the node", want: ok},
		} {
			t.Run(tt.name, func(t *testing.T) {
				dra := &fakeDRA{gpuClass: gpuClass, listed: tt.listed, pending: tt.pending}
				c := newClusterBinding(t, args, nodes, nil, false, frameworkruntime.WithSharedDRAManager(dra))
				got, status := filter(t, c, gt.MakeGPUPod("p").GPUs(1).Obj())
				if status != nil || got["upgrading"] != tt.want || got["dp"] != ok {
					t.Errorf("status %v, filter %v, want upgrading %q", status, got, tt.want)
				}
			})
		}
	})
	t.Run("a DRA pod on a node where a pod holds GPUs by annotation", func(t *testing.T) {
		nodes, slices := draNodes()
		for _, tt := range []struct {
			name, holderOn string
			pod            *v1.Pod
			want           string
		}{
			{name: "a claim pod, the holder on the DRA node", holderOn: "dra", pod: claimPod("p", "one"), want: waits},
			{name: "a claim pod, the holder elsewhere", holderOn: "dp", pod: claimPod("p", "one"), want: ok},
			{name: "nvidia.com/gpu served by DRA, the holder on the DRA node", holderOn: "dra", pod: gt.MakeGPUPod("p").GPUs(1).Obj(), want: waits},
			{name: "nvidia.com/gpu served by DRA, the holder elsewhere", holderOn: "dp", pod: gt.MakeGPUPod("p").GPUs(1).Obj(), want: ok},
		} {
			t.Run(tt.name, func(t *testing.T) {
				holder := gt.MakeGPUPod("old").Node(tt.holderOn).Assigned(gpu.Assignment{Node: tt.holderOn, Devices: []int{0}, Milli: 1000}).Obj()
				dra := &fakeDRA{slices: slices, gpuClass: gpuClass, claims: map[string]*resourceapi.ResourceClaim{"one": gpuClaim("one", 1)}}
				c := newClusterBinding(t, args, nodes, []*v1.Pod{holder}, false, frameworkruntime.WithSharedDRAManager(dra))
				got, status := filter(t, c, tt.pod)
				if status != nil || got["dra"] != tt.want {
					t.Errorf("status %v, filter %v, want dra %q", status, got, tt.want)
				}
			})
		}
	})
}

// TestClaimPodsShapeTheTypicalPods: a pod whose GPUs are a ResourceClaim's
// enters the learned typical pods with its claim's shape, not as a pod
// without GPUs; a pod whose claim cannot be read yet enters once it can.
// (The window recomputes its typical pods when it has none, so each pod
// below is a fresh cluster's first.)
func TestClaimPodsShapeTheTypicalPods(t *testing.T) {
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyFragFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		Fragmentation: config.Fragmentation{HalfLifePods: 10}, DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	cluster := func(claims ...*resourceapi.ResourceClaim) (*testCluster, *fakeDRA) {
		_, slices := draNodes()
		dra := &fakeDRA{slices: slices, gpuClass: gpuClass, claims: map[string]*resourceapi.ResourceClaim{}}
		for _, c := range claims {
			dra.claims[c.Name] = c
		}
		return newDRACluster(t, args, dra), dra
	}
	prefilter := func(c *testCluster, pod *v1.Pod) []gpu.TypicalPod {
		t.Helper()
		if _, status, _ := c.fw.RunPreFilterPlugins(context.Background(), framework.NewCycleState(), pod); !status.IsSuccess() && !status.IsSkip() {
			t.Fatal(status)
		}
		return c.plugin.TypicalPods()
	}
	pod := func(name, claim string) *v1.Pod {
		p := claimPod(name, claim)
		p.UID = types.UID(name)
		return p
	}
	// p's claim asks for one whole GPU.
	c, _ := cluster(gpuClaim("one", 1))
	if tp := prefilter(c, pod("p", "one")); len(tp) != 1 || tp[0].Demand.Count != 1 || tp[0].Demand.Milli != gpu.MilliPerGPU {
		t.Errorf("after p: typical pods %+v, want p's claim's one GPU", tp)
	}
	// q's claim is not in the tracker yet: q is not observed, and is once
	// its claim is there.
	c, dra := cluster()
	q := pod("q", "two")
	if tp := prefilter(c, q); len(tp) != 0 {
		t.Errorf("after q, whose claim cannot be read: typical pods %+v, want none", tp)
	}
	dra.claims["two"] = gpuClaim("two", 2)
	if tp := prefilter(c, q); len(tp) != 1 || tp[0].Demand.Count != 2 {
		t.Errorf("after q's claim for two GPUs: typical pods %+v, want q's claim's two GPUs", tp)
	}
}
