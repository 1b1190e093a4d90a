package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestModelsOf: the models a claim's selectors admit across the cluster
// become its demand's model list, so that PairFit prices a claim that pins
// models as it prices a pod annotated with them; a claim whose selectors
// admit every GPU stays unconstrained. Node a has two A100s, node b two
// H100s; the models are named as the engine names them (GFD's form, the
// product name with dashes for spaces).
func TestModelsOf(t *testing.T) {
	const a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
	m := &modelsManager{slices: []*resourceapi.ResourceSlice{twoGPUSlice("a", a100), twoGPUSlice("b", h100)},
		class: &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com'"}}}}}}
	r := &Reader{manager: m, src: gpu.DRASource{Driver: gpu.DefaultDRADriver}, celCache: cel.NewCache(10, cel.Features{})}
	selecting := func(expr string) []resourceapi.DeviceSelector {
		if expr == "" {
			return nil
		}
		return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	}
	for _, tt := range []struct {
		name, selector string
		want           []string
		noGPU          bool // the selectors select no GPU of the driver
	}{
		{name: "no selector: every GPU", want: nil},
		{name: "one model", selector: "device.attributes['gpu.nvidia.com'].productName == '" + a100 + "'", want: []string{"NVIDIA-A100-SXM4-80GB"}},
		{name: "both models: every GPU", selector: "device.attributes['gpu.nvidia.com'].productName in ['" + a100 + "', '" + h100 + "']", want: nil},
		{name: "one GPU pinned by UUID", selector: "device.attributes['gpu.nvidia.com'].uuid == 'GPU-b-1'", want: []string{"NVIDIA-H100-80GB-HBM3"}},
		{name: "no GPU at all", selector: "device.attributes['gpu.nvidia.com'].uuid == 'GPU-c-0'", want: nil, noGPU: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			cycle, err := r.read(ctx, false)
			if err != nil || cycle == nil {
				t.Fatalf("read: %v, %v", cycle, err)
			}
			ask := &gpu.ClaimAsk{Class: "gpu.nvidia.com", Count: 1, Selectors: selecting(tt.selector)}
			for range 2 { // the second answer is the one kept for the listing
				if got, selects := r.modelsOf(ctx, cycle, r.selectorOf(ask)); !slices.Equal(got, tt.want) || selects == tt.noGPU {
					t.Errorf("models %q, selects GPUs %t; want %q, %t", got, selects, tt.want, !tt.noGPU)
				}
			}
		})
	}
}

// modelsManager is a fwk.SharedDRAManager with fixed slices, one class and
// nothing allocated.
type modelsManager struct {
	slices []*resourceapi.ResourceSlice
	class  *resourceapi.DeviceClass
}

func (m *modelsManager) ResourceClaims() fwk.ResourceClaimTracker     { return noClaims{} }
func (m *modelsManager) ResourceSlices() fwk.ResourceSliceLister      { return m }
func (m *modelsManager) DeviceClasses() fwk.DeviceClassLister         { return m }
func (m *modelsManager) DeviceClassResolver() fwk.DeviceClassResolver { return nil }
func (m *modelsManager) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{m.class}, nil
}
func (m *modelsManager) Get(string) (*resourceapi.DeviceClass, error) { return m.class, nil }
func (m *modelsManager) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return m.slices, nil
}

// noClaims is a claim tracker with nothing allocated.
type noClaims struct{}

func (noClaims) List() ([]*resourceapi.ResourceClaim, error) { return nil, nil }
func (noClaims) Get(_, name string) (*resourceapi.ResourceClaim, error) {
	return nil, fmt.Errorf("claim %s not found", name)
}
func (noClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) { return nil, nil }
func (noClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	return &structured.AllocatedState{}, nil
}
func (noClaims) SignalClaimPendingAllocation(types.UID, *resourceapi.ResourceClaim) error { return nil }
func (noClaims) GetPendingAllocation(types.UID) *resourceapi.AllocationResult             { return nil }
func (noClaims) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool                   { return false }
func (noClaims) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error                 { return nil }
func (noClaims) AssumedClaimRestore(string, string)                                       {}

// twoGPUSlice is NVIDIA's slice for a node with two GPUs of a product.
func twoGPUSlice(node, product string) *resourceapi.ResourceSlice {
	w := gt.MakeNVIDIASlice("slice-"+node, node)
	for i := range 2 {
		w.GPU(i, fmt.Sprintf("GPU-%s-%d", node, i), product, 81920, "")
	}
	return w.Obj()
}
