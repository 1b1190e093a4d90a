package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestClaimDemand: what GPUGang reads of a claim pod (dragpus.GPUs) is the
// claim as the device choice reads it: whole GPUs with the models its
// selectors admit, or a share by its memory; a claim that selects no GPU
// of the driver or two claims are no demand, and a claim not created yet
// (by name, or from a template) is pending.
// Node a has two A100s, node b two H100s.
func TestClaimDemand(t *testing.T) {
	const a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
	claim := func(name string, count int64, selector string, memory string) *resourceapi.ResourceClaim {
		r := resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
		if selector != "" {
			r.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		if memory != "" {
			r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &r}}}}}
	}
	m := &claimsManager{modelsManager: modelsManager{slices: []*resourceapi.ResourceSlice{twoGPUSlice("a", a100), twoGPUSlice("b", h100)},
		class: &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com'"}}}}}},
		claims: map[string]*resourceapi.ResourceClaim{}}
	for _, c := range []*resourceapi.ResourceClaim{
		claim("two", 2, "", ""),
		claim("two-a100", 2, "device.attributes['gpu.nvidia.com'].productName == '"+a100+"'", ""),
		claim("share", 1, "", "10Gi"),
		claim("no-gpu", 1, "device.attributes['gpu.nvidia.com'].uuid == 'GPU-c-0'", ""),
	} {
		m.claims[c.Name] = c
	}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	cycle, err := r.read(context.Background(), false)
	if err != nil || cycle == nil {
		t.Fatalf("read: %v, %v", cycle, err)
	}
	pod := func(claims ...string) *v1.Pod {
		p := gt.MakeGPUPod("p").Obj()
		for i, c := range claims {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: fmt.Sprint("c", i), ResourceClaimName: ptr.To(c)})
		}
		return p
	}
	fromTemplate := gt.MakeGPUPod("p").Obj()
	fromTemplate.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("two-gpus")}}
	madeFromTemplate := fromTemplate.DeepCopy()
	madeFromTemplate.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("two")}}
	for _, tt := range []struct {
		name    string
		pod     *v1.Pod
		want    gpu.Demand
		pending bool
	}{
		{"two GPUs of any model", pod("two"), gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}, false},
		{"two A100s", pod("two-a100"), gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU, Models: []string{"NVIDIA-A100-SXM4-80GB"}}, false},
		// 10Gi = 10240 MiB of one GPU, planned by its memory.
		{"a share of 10Gi", pod("share"), gpu.Demand{Count: 1, Milli: 1, MemoryMiB: 10240}, false},
		{"no GPU of the driver", pod("no-gpu"), gpu.Demand{}, false},
		{"claim not created yet", pod("missing"), gpu.Demand{}, true},
		{"claim from a template, not made yet", fromTemplate, gpu.Demand{}, true},
		{"claim from a template, made", madeFromTemplate, gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}, false},
		{"two claims: left to DRA", pod("two", "share"), gpu.Demand{}, false},
		{"no claim", pod(), gpu.Demand{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, pending := cycle.ClaimDemand(context.Background(), tt.pod)
			if pending != tt.pending || got.Count != tt.want.Count || got.Milli != tt.want.Milli || got.MemoryMiB != tt.want.MemoryMiB || !slices.Equal(got.Models, tt.want.Models) {
				t.Errorf("got %+v, pending %t; want %+v, %t", got, pending, tt.want, tt.pending)
			}
		})
	}
}

// claimsManager is a modelsManager whose tracker has claims, by name,
// none of them allocated.
type claimsManager struct {
	modelsManager
	claims map[string]*resourceapi.ResourceClaim
}

func (m *claimsManager) ResourceClaims() fwk.ResourceClaimTracker {
	return claimsTracker{claims: m.claims}
}

type claimsTracker struct {
	noClaims
	claims map[string]*resourceapi.ResourceClaim
}

func (c claimsTracker) Get(_, name string) (*resourceapi.ResourceClaim, error) {
	if claim, ok := c.claims[name]; ok {
		return claim, nil
	}
	return nil, fmt.Errorf("claim %s not found", name)
}

// TestDRAFleet: the census PairFit prices models with counts the GPUs the
// DRA driver's slices publish beside those of the nodes the ledger read,
// each node's GPUs once, and stays the same slice while the sum does (the
// policy's memos are kept by it). Nodes a and b publish two A100s and two
// H100s, and a carries GPU Feature Discovery labels for its two A100s too;
// node t has four T4s by its labels.
func TestDRAFleet(t *testing.T) {
	const a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
	m := &modelsManager{slices: []*resourceapi.ResourceSlice{twoGPUSlice("a", a100), twoGPUSlice("b", h100)}}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	ledger := gpu.NewLedger()
	fleet := FleetOf(ledger, r)
	if got := fleet.GPUsByModel(); len(got) != 0 {
		t.Fatalf("before any read: %v, want nothing", got)
	}
	if _, err := r.read(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	noPods := slices.Values([]*v1.Pod(nil))
	ledger.Node(gt.MakeGPUNode("t").GFD("Tesla-T4", 4, 15360).Obj(), 1, noPods)
	ledger.Node(gt.MakeGPUNode("a").GFD("NVIDIA-A100-SXM4-80GB", 2, 81920).Obj(), 1, noPods)
	want := gpu.ModelGPUs{{Model: "NVIDIA-A100-SXM4-80GB", GPUs: 2}, {Model: "NVIDIA-H100-80GB-HBM3", GPUs: 2}, {Model: "Tesla-T4", GPUs: 4}}
	first := fleet.GPUsByModel()
	if !slices.Equal(first, want) {
		t.Errorf("census %v, want %v", first, want)
	}
	if again := fleet.GPUsByModel(); unsafe.SliceData(again) != unsafe.SliceData(first) {
		t.Errorf("the census was rebuilt although nothing changed")
	}
	// The same slices listed again as new objects: a new listing, the same sum.
	m.slices = []*resourceapi.ResourceSlice{twoGPUSlice("a", a100), twoGPUSlice("b", h100)}
	if _, err := r.read(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if again := fleet.GPUsByModel(); unsafe.SliceData(again) != unsafe.SliceData(first) {
		t.Errorf("a new listing of the same GPUs gave a new census %v", again)
	}
	// The room: the T4s the ledger reads, and the DRA GPUs with nothing
	// allocated; node a's A100s count once, by its slices, not also as the
	// ledger read them from its labels (4000 if they did).
	room := fleet.(gpu.FleetRoom).RoomByModel()
	for model, want := range map[string]int64{"Tesla-T4": 4000, "NVIDIA-A100-SXM4-80GB": 2000, "NVIDIA-H100-80GB-HBM3": 2000} {
		if got := room.Of(model); got != want {
			t.Errorf("room of %s: %d, want %d", model, got, want)
		}
	}
	if _, err := r.read(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if fleet.(gpu.FleetRoom).RoomByModel() != room {
		t.Errorf("the room was handed out anew although it did not change")
	}
	if FleetOf(ledger, nil) != gpu.Fleet(ledger) {
		t.Errorf("without DRA the fleet is not the ledger")
	}
}
