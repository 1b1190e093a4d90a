package gpudra

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// do not change. A second cycle lists the same slices in another order
// and takes the first cycle's twins again, with the same outcome. Under -race, it checks that arranging one node's twins
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
			m := &orderedManager{}
			var kept *twinSet
			for cycle := range 2 {
				l := m.twins(all, prefs.Driver())
				if cycle == 1 && l.twinSet != kept {
					t.Errorf("cycle 2 got new twins")
				}
				kept = l.twinSet
				if l.listing[slices.Index(all, other)] != other {
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
						t.Errorf("cycle %d, n%d: allocated %s, want its preferred g3", cycle+1, i, devices)
					}
				}
				if got := allocate(t, l.listing, "n3", gpuClaim(1)); got != "g0" {
					t.Errorf("cycle %d, n3, never filtered: allocated %s, want first fit g0", cycle+1, got)
				}
				if want := map[string]int{"n0": cycle + 1, "n1": cycle + 1, "n2": cycle + 1}; fmt.Sprint(prefs.asks) != fmt.Sprint(want) {
					t.Errorf("cycle %d: asked %v, want %v", cycle+1, prefs.asks, want)
				}
				slices.Reverse(all) // the next cycle lists the same slices in another order
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

// TestTwinListingAgain: the next cycle's listing of the same slices, in
// another order, takes the last cycle's twins again (no slice copied anew),
// with every device list the last cycle arranged back in published order
// and a node's slices of one pool again by name in their new places; a
// listing of other slices, or of another driver, gets new twins.
//
// Nodes a and b publish g0..g3 in one slice; node c publishes its pool in
// two slices, c-2 (g2,g3) listed before c-1 (g0,g1).
func TestTwinListingAgain(t *testing.T) {
	ctx := context.Background()
	node := func(name string) fwk.NodeInfo {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		return ni
	}
	other := slice("other", "a", "other", 1, "g0")
	other.Spec.Driver = "other.example.com"
	all := []*resourceapi.ResourceSlice{
		slice("a", "a", "a", 1, "g0", "g1", "g2", "g3"), slice("b", "b", "b", 1, "g0", "g1", "g2", "g3"),
		other, slice("c-2", "c", "c", 2, "g2", "g3"), slice("c-1", "c", "c", 2, "g0", "g1"),
	}
	order := Order{"a": names("a", "g3"), "b": names("b", "g2"), "c": names("c", "g3", "g2")}
	m := &orderedManager{}

	first := m.twins(all, testDriver)
	first.arrange(ctx, node("a"), order)
	first.arrange(ctx, node("c"), order)
	if got, want := listing(first.listing), "a:g3,g0,g1,g2 b:g0,g1,g2,g3 other:g0 c-1:g3,g2 c-2:g0,g1"; got != want {
		t.Fatalf("first cycle, a and c arranged: %s, want %s", got, want)
	}

	reversed := slices.Clone(all)
	slices.Reverse(reversed)
	second := m.twins(reversed, testDriver)
	if second.twinSet != first.twinSet {
		t.Fatalf("the same slices listed again got new twins")
	}
	// c-1 and c-2 swap places to stay in name order; a and c are as published.
	if got, want := listing(second.listing), "c-1:g0,g1 c-2:g2,g3 other:g0 b:g0,g1,g2,g3 a:g0,g1,g2,g3"; got != want {
		t.Errorf("second cycle, nothing arranged: %s, want %s", got, want)
	}
	if second.listing[2] != other {
		t.Errorf("another driver's slice was twinned")
	}
	second.arrange(ctx, node("b"), order)
	if got, want := listing(second.listing), "c-1:g0,g1 c-2:g2,g3 other:g0 b:g2,g0,g1,g3 a:g0,g1,g2,g3"; got != want {
		t.Errorf("second cycle, b arranged: %s, want %s", got, want)
	}

	republished := slices.Clone(all)
	republished[1] = slice("b", "b", "b", 1, "g0", "g1", "g2", "g3")
	for _, tt := range []struct {
		name   string
		all    []*resourceapi.ResourceSlice
		driver string
	}{
		{"a slice republished", republished, testDriver},
		{"a slice removed", all[1:], testDriver},
		{"another driver", all, "other.example.com"},
	} {
		kept := m.twins(all, testDriver).twinSet
		if next := m.twins(tt.all, tt.driver); next.twinSet == kept {
			t.Errorf("%s: the kept twins were taken again", tt.name)
		}
	}
	if got := listing(all); got != "a:g0,g1,g2,g3 b:g0,g1,g2,g3 other:g0 c-2:g2,g3 c-1:g0,g1" {
		t.Errorf("the listed slices changed to %s", got)
	}
}

// BenchmarkTwinListing lists 5000 nodes of one ten-GPU slice each, in a
// new order each cycle as the scheduler's DRA manager lists them, and
// arranges 500 of them (about the nodes a cycle filters at 5000 nodes):
// "new" copies every slice each cycle, "again" takes the last cycle's
// twins.
func BenchmarkTwinListing(b *testing.B) {
	ctx := context.Background()
	var all []*resourceapi.ResourceSlice
	var filtered []fwk.NodeInfo
	order := Order{}
	for i := range 5000 {
		name := fmt.Sprintf("node-%d", i)
		all = append(all, slice(name, name, name, 1, "g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9"))
		if i%10 == 0 {
			ni := framework.NewNodeInfo()
			ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			filtered = append(filtered, ni)
			order[name] = names(name, "g7")
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	orders := make([][]*resourceapi.ResourceSlice, 8)
	for k := range orders {
		orders[k] = slices.Clone(all)
		rng.Shuffle(len(all), func(i, j int) { orders[k][i], orders[k][j] = orders[k][j], orders[k][i] })
	}
	for _, mode := range []string{"new", "again"} {
		b.Run(mode, func(b *testing.B) {
			m := &orderedManager{}
			for i := 0; b.Loop(); i++ {
				var l *twinListing
				if mode == "new" {
					l = newTwinListing(orders[i%len(orders)], ofDriver(testDriver), &m.memo)
				} else {
					l = m.twins(orders[i%len(orders)], testDriver)
				}
				for _, ni := range filtered {
					l.arrange(ctx, ni, order)
				}
			}
		})
	}
}
