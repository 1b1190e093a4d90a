package gpudra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/parallelize"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"
)

// gpuClass selects every device of the test driver.
var gpuClass = &resourceapi.DeviceClass{
	ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
	Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.driver == %q", testDriver)}}}},
}

// gpuClaim asks for count devices of gpuClass.
func gpuClaim(count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID("c")},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}},
	}
}

// allocate runs the structured allocator on the listing for the claim on
// node, with nothing allocated, and returns the devices it takes, sorted.
func allocate(t *testing.T, all []*resourceapi.ResourceSlice, node string, claim *resourceapi.ResourceClaim) string {
	t.Helper()
	empty := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	allocator, err := structured.NewAllocator(context.Background(), structured.Features{}, empty, classes{gpuClass}, all, cel.NewCache(10, cel.Features{}))
	if err != nil {
		t.Fatal(err)
	}
	results, err := allocator.Allocate(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{claim})
	if err != nil || len(results) != 1 {
		t.Fatalf("allocate on %s: %v, %d results", node, err, len(results))
	}
	var got []string
	for _, r := range results[0].Devices.Results {
		got = append(got, r.Device)
	}
	slices.Sort(got)
	return strings.Join(got, ",")
}

// TestAllocatorTakesAPoolsPreferredDevices: on a node that publishes its
// pool in two slices, each implementation of the allocator takes the
// preferred devices, though they lie in different slices and the slices
// are listed out of name order (the newer allocators take a pool's slices
// by name, the stable one in listed order). Moving whole slices instead,
// with the slice holding the best device first, gets g2,g3 from the stable
// allocator (g2 beside g3 comes before g1) and first fit, g0,g1, from the
// newer ones, which sort the slices back by name.
func TestAllocatorTakesAPoolsPreferredDevices(t *testing.T) {
	for _, impl := range []string{"stable", "incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			defer structured.EnableAllocators()
			all := []*resourceapi.ResourceSlice{slice("n-2", "n", "n", 2, "g2", "g3"), slice("n-1", "n", "n", 2, "g0", "g1")}
			all = Reorder(all, Order{"n": names("n", "g3", "g1")})
			if got := allocate(t, all, "n", gpuClaim(2)); got != "g1,g3" {
				t.Errorf("allocated %s, want g1,g3", got)
			}
		})
	}
}

// countingPreferences prefers each node's g3, counting the asks by node.
type countingPreferences struct {
	mu   sync.Mutex
	asks map[string]int
}

func (p *countingPreferences) Driver() string { return testDriver }
func (p *countingPreferences) Of(_ context.Context, node fwk.NodeInfo) []DeviceName {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asks[node.Node().Name]++
	return names(node.Node().Name, "g3")
}

// TestTwinListingArrangesTheFilteredNodes runs each implementation of the
// allocator on a twin listing prepared as the plugin's PreFilter prepares
// it for that implementation, with the nodes of the cycle n0..n2: the
// nodes, then filtered concurrently and twice each (as a node can be
// filtered again, with nominated pods), get their preferred device, asked
// for once per node; node n3, never filtered and not in the cycle, keeps
// first fit; another driver's slice is not twinned; and the listed slices
// do not change. Under -race, it checks that arranging one node's twins
// while the allocator works on another is no data race: with the stable
// implementation, which reads every node's devices, that needs the twins
// arranged in PreFilter (arrangeInFilter false).
func TestTwinListingArrangesTheFilteredNodes(t *testing.T) {
	for _, impl := range []string{"stable", "incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			defer structured.EnableAllocators()
			ctx := context.Background()
			inFilter := arrangeInFilter(ctx, feature.Features{})
			if inFilter != (impl != "stable") {
				t.Errorf("arranged in Filter: %t, want %t", inFilter, impl != "stable")
			}
			var all []*resourceapi.ResourceSlice
			var nodes []fwk.NodeInfo
			for i := range 4 {
				node := fmt.Sprintf("n%d", i)
				all = append(all, slice(node, node, node, 1, "g0", "g1", "g2", "g3"))
				if i < 3 {
					ni := framework.NewNodeInfo()
					ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
					nodes = append(nodes, ni)
				}
			}
			other := slice("other", "n0", "other", 1, "g0")
			other.Spec.Driver = "other.example.com"
			all = append(all, other)
			before := listing(all)
			prefs := &countingPreferences{asks: map[string]int{}}
			l := newTwinListing(all, ofDriver(prefs.Driver()), &reorderMemo{})
			if l.listing[4] != other {
				t.Errorf("another driver's slice was twinned")
			}
			l.prepare(ctx, inFilter, nodes, prefs, parallelize.NewParallelizer(2))
			got := make([]string, len(nodes))
			var wg sync.WaitGroup
			for i, ni := range nodes {
				wg.Go(func() {
					for range 2 {
						l.arrange(ctx, ni, prefs)
					}
					got[i] = allocate(t, l.listing, ni.Node().Name, gpuClaim(1))
				})
			}
			wg.Wait()
			for i, devices := range got {
				if devices != "g3" {
					t.Errorf("n%d: allocated %s, want its preferred g3", i, devices)
				}
			}
			if got := allocate(t, l.listing, "n3", gpuClaim(1)); got != "g0" {
				t.Errorf("n3, never filtered: allocated %s, want first fit g0", got)
			}
			if want := map[string]int{"n0": 1, "n1": 1, "n2": 1}; fmt.Sprint(prefs.asks) != fmt.Sprint(want) {
				t.Errorf("asked %v, want %v", prefs.asks, want)
			}
			if listing(all) != before {
				t.Errorf("the listed slices changed to %s", listing(all))
			}
		})
	}
}

// TestTwinListingOfPoolsSpanningNodes: where a pool may span nodes (a
// node's pool not named after it, or a slice of the driver local to no one
// node, which may name a node's pool), every node's twins are arranged in
// PreFilter whatever the allocator.
func TestTwinListingOfPoolsSpanningNodes(t *testing.T) {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	for _, tt := range []struct {
		pool     string
		nonLocal bool
		inFilter bool
		asks     int
	}{
		{pool: "a", inFilter: true, asks: 0},
		{pool: "a", inFilter: false, asks: 1},
		{pool: "shared", inFilter: true, asks: 1},
		{pool: "a", nonLocal: true, inFilter: true, asks: 1},
	} {
		prefs := &countingPreferences{asks: map[string]int{}}
		all := []*resourceapi.ResourceSlice{slice("a", "a", tt.pool, 1, "g0", "g3")}
		if tt.nonLocal {
			s := slice("everywhere", "", "a", 1, "g9")
			s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
			all = append(all, s)
		}
		l := newTwinListing(all, ofDriver(testDriver), &reorderMemo{})
		l.prepare(context.Background(), tt.inFilter, []fwk.NodeInfo{ni}, prefs, parallelize.NewParallelizer(1))
		if got := prefs.asks["a"]; got != tt.asks {
			t.Errorf("pool %s, a slice of no one node %t, arranged in Filter %t: asked %d times in PreFilter, want %d", tt.pool, tt.nonLocal, tt.inFilter, got, tt.asks)
		}
	}
}
