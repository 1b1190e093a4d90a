package gpu_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestAskOfClaims: which claims the policies place (the rest are left to DRA's
// first fit), and what it reads of them.
func TestAskOfClaims(t *testing.T) {
	exact := func(mutate func(r *resourceapi.ExactDeviceRequest)) []*resourceapi.ResourceClaim {
		r := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}
		if mutate != nil {
			mutate(r)
		}
		return []*resourceapi.ResourceClaim{{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: r}}}}}}
	}
	memory := func(name resourceapi.QualifiedName, q string) func(r *resourceapi.ExactDeviceRequest) {
		return func(r *resourceapi.ExactDeviceRequest) {
			r.Count = 1
			r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{name: resource.MustParse(q)}}
		}
	}
	twoClaims := append(exact(nil), exact(nil)...)
	twoRequests := exact(nil)
	twoRequests[0].Spec.Devices.Requests = append(twoRequests[0].Spec.Devices.Requests, twoRequests[0].Spec.Devices.Requests[0])
	firstAvailable := []*resourceapi.ResourceClaim{{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.nvidia.com"}}}}}}}}
	constrained := exact(nil)
	constrained[0].Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To[resourceapi.FullyQualifiedName]("resource.kubernetes.io/pcieRoot")}}
	tests := []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   *gpu.ClaimAsk // nil: not read
	}{
		{name: "two devices of a class", claims: exact(nil), want: &gpu.ClaimAsk{Class: "gpu.nvidia.com", Count: 2}},
		{name: "a share of 10Gi = 10240 MiB", claims: exact(memory("memory", "10Gi")), want: &gpu.ClaimAsk{Class: "gpu.nvidia.com", Count: 1, MemoryMiB: 10240}},
		{name: "memory in the driver's domain", claims: exact(memory("gpu.nvidia.com/memory", "1000Mi")), want: &gpu.ClaimAsk{Class: "gpu.nvidia.com", Count: 1, MemoryMiB: 1000}},
		{name: "constraints: the engine's choice could break one", claims: constrained},
		{name: "tolerations", claims: exact(func(r *resourceapi.ExactDeviceRequest) {
			r.Tolerations = []resourceapi.DeviceToleration{{Key: "gpu.nvidia.com/xid", Operator: resourceapi.DeviceTolerationOpExists}}
		})},
		{name: "another capacity", claims: exact(memory("cores", "10"))},
		{name: "memory in another driver's domain", claims: exact(memory("example.com/memory", "1Gi"))},
		{name: "allocation mode All", claims: exact(func(r *resourceapi.ExactDeviceRequest) { r.AllocationMode = resourceapi.DeviceAllocationModeAll })},
		{name: "admin access", claims: exact(func(r *resourceapi.ExactDeviceRequest) { r.AdminAccess = ptr.To(true) })},
		{name: "65 devices: more than a node has", claims: exact(func(r *resourceapi.ExactDeviceRequest) { r.Count = 65 })},
		{name: "two claims to allocate", claims: twoClaims},
		{name: "two requests", claims: twoRequests},
		{name: "firstAvailable", claims: firstAvailable},
		{name: "no claim", claims: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gpu.AskOfClaims(tt.claims, "gpu.nvidia.com")
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("read %+v, want the claims left to DRA", got)
			case tt.want != nil && (got == nil || got.Class != tt.want.Class || got.Count != tt.want.Count || got.MemoryMiB != tt.want.MemoryMiB):
				t.Errorf("read %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestClaimAskDemand: an ask as a demand on any node.
func TestClaimAskDemand(t *testing.T) {
	for _, tt := range []struct {
		ask  gpu.ClaimAsk
		want gpu.Demand
	}{
		{gpu.ClaimAsk{Count: 2}, gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}},
		// One device's memory: a share of one GPU by memory.
		{gpu.ClaimAsk{Count: 1, MemoryMiB: 10240}, gpu.Demand{Count: 1, Milli: 1, MemoryMiB: 10240}},
		// Memory on each of two devices: two GPUs, whole.
		{gpu.ClaimAsk{Count: 2, MemoryMiB: 10240}, gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}},
	} {
		if got := tt.ask.Demand(); got.Count != tt.want.Count || got.Milli != tt.want.Milli || got.MemoryMiB != tt.want.MemoryMiB {
			t.Errorf("%+v: demand %+v, want %+v", tt.ask, got, tt.want)
		}
	}
}

// TestClaimNames: a pod's claims by name, its own or made from a template,
// and not yet when a template's claim is not recorded in its status.
func TestClaimNames(t *testing.T) {
	pod := func(statuses ...v1.PodResourceClaimStatus) *v1.Pod {
		return &v1.Pod{
			Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{
				{Name: "own", ResourceClaimName: ptr.To("shared-gpu")},
				{Name: "tmpl", ResourceClaimTemplateName: ptr.To("one-gpu")},
			}},
			Status: v1.PodStatus{ResourceClaimStatuses: statuses},
		}
	}
	for _, tt := range []struct {
		name string
		pod  *v1.Pod
		want []string
		made bool
	}{
		{"template's claim not made yet", pod(), nil, false},
		{"template's claim made", pod(v1.PodResourceClaimStatus{Name: "tmpl", ResourceClaimName: ptr.To("p-tmpl-x7")}), []string{"shared-gpu", "p-tmpl-x7"}, true},
		{"template needs no claim", pod(v1.PodResourceClaimStatus{Name: "tmpl"}), []string{"shared-gpu"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, made := gpu.ClaimNames(tt.pod)
			if made != tt.made || len(got) != len(tt.want) || (len(got) > 0 && (got[0] != tt.want[0] || got[len(got)-1] != tt.want[len(tt.want)-1])) {
				t.Errorf("got %q, made %t; want %q, %t", got, made, tt.want, tt.made)
			}
		})
	}
}

// TestDRAAllocatedBy: allocated claims as the scheduler's allocated state
// counts them. Claim whole takes gpu-0; two shares on gpu-1 consume 10Gi
// and 1000Mi: 10240 + 1000 = 11240 MiB; an admin-access result, another
// driver's device and an unallocated claim take nothing.
func TestDRAAllocatedBy(t *testing.T) {
	const driver = "gpu.nvidia.com"
	result := func(device, share, memory string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: "node-a", Device: device}
		if share != "" {
			r.ShareID = ptr.To(types.UID(share))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{gpu.DRACapacityMemory: resource.MustParse(memory)}
		}
		return r
	}
	claim := func(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}}}
	}
	admin := result("gpu-2", "", "")
	admin.AdminAccess = ptr.To(true)
	other := result("gpu-3", "", "")
	other.Driver = "example.com"
	got := gpu.DRAAllocatedBy([]*resourceapi.ResourceClaim{
		claim(result("gpu-0", "", "")),
		claim(result("gpu-1", "s1", "10Gi")),
		claim(result("gpu-1", "s2", "1000Mi"), admin, other),
		{}, // not allocated
	}, driver)
	id := func(device string) gpu.DRADeviceID {
		return gpu.DRADeviceID{Driver: driver, Pool: "node-a", Device: device}
	}
	if len(got.Exclusive) != 1 || !got.Exclusive[id("gpu-0")] {
		t.Errorf("whole: %v, want gpu-0 alone", got.Exclusive)
	}
	if len(got.SharedMemoryMiB) != 1 || got.SharedMemoryMiB[id("gpu-1")] != 11240 {
		t.Errorf("shared: %v, want gpu-1 with 11240 MiB", got.SharedMemoryMiB)
	}
}
