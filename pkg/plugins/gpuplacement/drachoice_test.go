package gpuplacement

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestAskOf: which claims the policy places (the rest are left to DRA's
// first fit), and what it reads of them.
func TestAskOf(t *testing.T) {
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
		want   *draAsk // nil: not read
	}{
		{name: "two devices of a class", claims: exact(nil), want: &draAsk{class: "gpu.nvidia.com", count: 2}},
		{name: "a share of 10Gi = 10240 MiB", claims: exact(memory("memory", "10Gi")), want: &draAsk{class: "gpu.nvidia.com", count: 1, memoryMiB: 10240}},
		{name: "memory in the driver's domain", claims: exact(memory("gpu.nvidia.com/memory", "1000Mi")), want: &draAsk{class: "gpu.nvidia.com", count: 1, memoryMiB: 1000}},
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
			got := askOf(tt.claims, "gpu.nvidia.com")
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("read %+v, want the claims left to DRA", got)
			case tt.want != nil && (got == nil || got.class != tt.want.class || got.count != tt.want.count || got.memoryMiB != tt.want.memoryMiB):
				t.Errorf("read %+v, want %+v", got, tt.want)
			}
		})
	}
}
