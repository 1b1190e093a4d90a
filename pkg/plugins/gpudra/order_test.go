package gpudra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"
)

const testDriver = "gpu.example.com"

// slice is a ResourceSlice of node's pool with the named devices, each with
// an int attribute "index" (its number in the name) and 80 GiB of memory.
func slice(name, node, pool string, count int64, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: testDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: pool, ResourceSliceCount: count},
		},
	}
	for _, d := range devices {
		var index int64
		fmt.Sscanf(strings.TrimPrefix(d, "g"), "%d", &index)
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name:       d,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(index)}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	return s
}

// listing is the slices as "name:device,device" in listed order.
func listing(all []*resourceapi.ResourceSlice) string {
	var out []string
	for _, s := range all {
		var names []string
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
		out = append(out, s.Name+":"+strings.Join(names, ","))
	}
	return strings.Join(out, " ")
}

func names(node string, devices ...string) []DeviceName {
	out := make([]DeviceName, len(devices))
	for i, d := range devices {
		out[i] = DeviceName{Driver: testDriver, Pool: node, Device: d}
	}
	return out
}

func TestReorder(t *testing.T) {
	nonLocal := slice("shared", "", "shared", 1, "g0")
	nonLocal.Spec.NodeName, nonLocal.Spec.AllNodes = nil, ptr.To(true)
	// A pool republished: generation 1's slice still listed beside 2's.
	oldGen, newGen := slice("a-1", "a", "a", 1, "g0", "g1"), slice("a-2", "a", "a", 1, "g2", "g3")
	oldGen.Spec.Pool.Generation, newGen.Spec.Pool.Generation = 1, 2
	// A pool of shared counters only, published in two slices.
	counters := func(name string) *resourceapi.ResourceSlice {
		s := slice(name, "a", "c", 2)
		s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: name, Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}}
		return s
	}
	tests := []struct {
		name  string
		all   []*resourceapi.ResourceSlice
		order Order
		want  string
		// same lists the positions whose slice must be the listed object,
		// published lists those whose device list must be the listed one
		// (not a copy).
		same, published []int
		// several is set where a node has several slices of a pool: their
		// devices are ordered afresh in every cycle, not through the memo.
		several bool
	}{{
		name:  "the preferred devices first, in the order's sequence; the rest in published order",
		all:   []*resourceapi.ResourceSlice{slice("a", "a", "a", 1, "g0", "g1", "g2", "g3")},
		order: Order{"a": names("a", "g2", "g0")},
		want:  "a:g2,g0,g1,g3",
	}, {
		name:  "nodes the order does not list, and slices of no one node, are the listed objects",
		all:   []*resourceapi.ResourceSlice{nonLocal, slice("b", "b", "b", 1, "g0", "g1"), slice("a", "a", "a", 1, "g0", "g1")},
		order: Order{"a": names("a", "g1")},
		want:  "shared:g0 b:g0,g1 a:g1,g0",
		same:  []int{0, 1},
	}, {
		name:      "a slice already in the preferred order keeps its published device list",
		all:       []*resourceapi.ResourceSlice{slice("a", "a", "a", 1, "g0", "g1", "g2")},
		order:     Order{"a": names("a", "g0", "g1")},
		want:      "a:g0,g1,g2",
		published: []int{0},
	}, {
		name:      "devices of another pool or driver are not the order's",
		all:       []*resourceapi.ResourceSlice{slice("a", "a", "other", 1, "g0", "g1")},
		order:     Order{"a": names("a", "g1")},
		want:      "a:g0,g1",
		published: []int{0},
	}, {
		name: "a node's slices of one pool list its devices in the preferred order, filling the slices by name with as many as each publishes; other slices stay",
		all: []*resourceapi.ResourceSlice{
			slice("a-1", "a", "a", 2, "g0", "g1"), slice("b", "b", "b", 1, "g0"), slice("a-2", "a", "a", 2, "g2", "g3"),
		},
		order:   Order{"a": names("a", "g3", "g1")},
		want:    "a-1:g3,g1 b:g0 a-2:g0,g2",
		same:    []int{1},
		several: true,
	}, {
		name: "a pool's slices listed out of name order take its places by name",
		all: []*resourceapi.ResourceSlice{
			slice("a-2", "a", "a", 2, "g2", "g3"), slice("b", "b", "b", 1, "g0"), slice("a-1", "a", "a", 2, "g0", "g1"),
		},
		order:   Order{"a": names("a", "g1")},
		want:    "a-1:g1,g0 b:g0 a-2:g2,g3",
		same:    []int{1},
		several: true,
	}, {
		name: "a node's slice in another pool stays: only the pool with several slices regroups",
		all: []*resourceapi.ResourceSlice{
			slice("a-x", "a", "x", 1, "g0", "g1"), slice("a-1", "a", "a", 3, "g0", "g1"), slice("b", "b", "b", 1, "g0"),
			slice("a-2", "a", "a", 3, "g2", "g3"), slice("a-3", "a", "a", 3, "g4"),
		},
		order:     Order{"a": names("a", "g4", "g2")},
		want:      "a-x:g0,g1 a-1:g4,g2 b:g0 a-2:g0,g1 a-3:g3",
		same:      []int{2},
		published: []int{0},
		several:   true,
	}, {
		name:    "slices of two generations of a pool are ordered apart: no device moves to the other generation",
		all:     []*resourceapi.ResourceSlice{oldGen, newGen},
		order:   Order{"a": names("a", "g1", "g3")},
		want:    "a-1:g1,g0 a-2:g3,g2",
		several: true,
	}, {
		name:    "a pool of counters only keeps its slices as they are",
		all:     []*resourceapi.ResourceSlice{counters("a-c1"), counters("a-c2"), slice("a", "a", "a", 1, "g0", "g1")},
		order:   Order{"a": names("a", "g1")},
		want:    "a-c1: a-c2: a:g1,g0",
		several: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := listing(tt.all)
			listed := slices.Clone(tt.all)
			got := Reorder(tt.all, tt.order)
			if listing(got) != tt.want {
				t.Errorf("got %s, want %s", listing(got), tt.want)
			}
			if listing(tt.all) != before || !slices.Equal(listed, tt.all) {
				t.Errorf("the listing changed to %s", listing(tt.all))
			}
			for _, i := range tt.same {
				if got[i] != tt.all[i] {
					t.Errorf("slice %d is a copy, want the listed object", i)
				}
			}
			for _, i := range tt.published {
				if &got[i].Spec.Devices[0] != &tt.all[i].Spec.Devices[0] {
					t.Errorf("slice %d lists a copy of its devices, want the published list", i)
				}
			}
			// Through the memo the listing is the same, and a second
			// cycle with the same preference gets the same device lists.
			memo := &reorderMemo{}
			first, second := reorder(tt.all, tt.order, memo), reorder(tt.all, tt.order, memo)
			if listing(first) != tt.want || listing(second) != tt.want {
				t.Errorf("through the memo: %s, then %s; want %s", listing(first), listing(second), tt.want)
			}
			for i := range first {
				if !tt.several && &first[i].Spec.Devices[0] != &second[i].Spec.Devices[0] {
					t.Errorf("through the memo, the devices of slice %d were reordered again", i)
				}
			}
		})
	}
}

// TestReorderMemoFollowsThePreference: the memo hands out a slice's
// reordering only for the preference it was made for.
func TestReorderMemoFollowsThePreference(t *testing.T) {
	all := []*resourceapi.ResourceSlice{slice("a", "a", "a", 1, "g0", "g1", "g2", "g3")}
	memo := &reorderMemo{}
	for _, step := range []struct {
		order Order
		want  string
	}{
		{Order{"a": names("a", "g2", "g0")}, "a:g2,g0,g1,g3"},
		{Order{"a": names("a", "g1")}, "a:g1,g0,g2,g3"},
		{Order{"a": names("a", "g2", "g0")}, "a:g2,g0,g1,g3"},
		{Order{"a": names("a", "g2", "g1")}, "a:g2,g1,g0,g3"},
	} {
		if got := listing(reorder(all, step.order, memo)); got != step.want {
			t.Errorf("order %v: got %s, want %s", step.order["a"], got, step.want)
		}
	}
}

// classes is a DeviceClassLister over fixed classes.
type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("no class %s", name)
}

// TestAllocatorFollowsTheOrder runs each implementation of the structured
// allocator compiled into the scheduler (stable, incubating,
// experimental) on slices in a policy's order: its first fit is the
// preferred devices when they satisfy the claim, and the next ones the
// claim allows when they do not; the claim's selectors and the devices
// already allocated count as without an order.
//
// Node n has GPUs g0..g3 in one slice; g1 is allocated.
func TestAllocatorFollowsTheOrder(t *testing.T) {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", testDriver)}}}},
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	claim := func(count int64, selector string) *resourceapi.ResourceClaim {
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
		if selector != "" {
			req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID("c")},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: req}}}},
		}
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		order Order
		want  string
	}{
		{name: "no order: first fit, g1 is taken", claim: claim(2, ""), want: "g0,g2"},
		{name: "the policy's two GPUs", claim: claim(2, ""), order: Order{"n": names("n", "g3", "g2")}, want: "g2,g3"},
		{name: "a preferred GPU that is allocated is passed over", claim: claim(1, ""), order: Order{"n": names("n", "g1", "g3")}, want: "g3"},
		{name: "a preferred GPU the selector rejects is passed over for the next in order",
			claim: claim(2, "device.attributes['gpu.example.com'].index != 3"), order: Order{"n": names("n", "g3", "g2")}, want: "g0,g2"},
	}
	for _, impl := range []string{"stable", "incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			defer structured.EnableAllocators()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					all := []*resourceapi.ResourceSlice{slice("n", "n", "n", 1, "g0", "g1", "g2", "g3")}
					if tt.order != nil {
						all = Reorder(all, tt.order)
					}
					allocated := structured.AllocatedState{
						AllocatedDevices:         sets.New(structured.MakeDeviceID(testDriver, "n", "g1")),
						AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
						AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
					}
					allocator, err := structured.NewAllocator(context.Background(), structured.Features{}, allocated, classes{class}, all, cel.NewCache(10, cel.Features{}))
					if err != nil {
						t.Fatal(err)
					}
					results, err := allocator.Allocate(context.Background(), node, []*resourceapi.ResourceClaim{tt.claim})
					if err != nil || len(results) != 1 {
						t.Fatalf("allocate: %v, %d results", err, len(results))
					}
					var got []string
					for _, r := range results[0].Devices.Results {
						got = append(got, r.Device)
					}
					slices.Sort(got)
					if strings.Join(got, ",") != tt.want {
						t.Errorf("allocated %v, want %s", got, tt.want)
					}
				})
			}
		})
	}
}

// TestAllocatorSharesThePreferredGPU: with consumable capacity (KEP-5075),
// which only the newer allocators implement, a claim for part of a GPU's
// memory shares the preferred GPU.
func TestAllocatorSharesThePreferredGPU(t *testing.T) {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	share := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID("c")},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "share", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}},
		}}}}},
	}
	for _, impl := range []string{"incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			defer structured.EnableAllocators()
			s := slice("n", "n", "n", 1, "g0", "g1", "g2")
			for i := range s.Spec.Devices {
				s.Spec.Devices[i].AllowMultipleAllocations = ptr.To(true)
			}
			all := Reorder([]*resourceapi.ResourceSlice{s}, Order{"n": names("n", "g2")})
			empty := structured.AllocatedState{
				AllocatedDevices:         sets.New[structured.DeviceID](),
				AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
				AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
			}
			allocator, err := structured.NewAllocator(context.Background(), structured.Features{ConsumableCapacity: true}, empty, classes{class}, all, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
			if err != nil {
				t.Fatal(err)
			}
			results, err := allocator.Allocate(context.Background(), node, []*resourceapi.ResourceClaim{share})
			if err != nil || len(results) != 1 || len(results[0].Devices.Results) != 1 {
				t.Fatalf("allocate: %v, %v", err, results)
			}
			if r := results[0].Devices.Results[0]; r.Device != "g2" || r.ShareID == nil {
				t.Errorf("allocated %s (share %v), want a share of g2", r.Device, r.ShareID)
			}
		})
	}
}

// TestArgsOf: GPUDynamicResources' args are DynamicResources' own, decoded
// strictly and validated as DynamicResources validates them.
func TestArgsOf(t *testing.T) {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	for _, tt := range []struct {
		name, raw, err string
	}{
		{name: "none", raw: ""},
		{name: "a filter timeout", raw: `{"filterTimeout": "5s"}`},
		{name: "a misspelt field", raw: `{"filterTimout": "5s"}`, err: `unknown field "filterTimout"`},
		{name: "a negative filter timeout", raw: `{"filterTimeout": "-1s"}`, err: "args.filterTimeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var obj runtime.Object
			if tt.raw != "" {
				obj = &runtime.Unknown{Raw: []byte(tt.raw), ContentType: runtime.ContentTypeJSON}
			}
			args, err := argsOf(obj, fts)
			switch {
			case tt.err == "" && (err != nil || args == nil):
				t.Errorf("argsOf: %v, want the args", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("argsOf: %v, want an error containing %q", err, tt.err)
			}
		})
	}
}
