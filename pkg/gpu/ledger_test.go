package gpu_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// podCache holds pods per node with a generation per node that changes with
// them, as the scheduler's cache does.
type podCache struct {
	pods  map[string][]*v1.Pod
	gen   map[string]int64
	clock int64
}

func newPodCache() *podCache {
	return &podCache{pods: map[string][]*v1.Pod{}, gen: map[string]int64{}}
}

func (c *podCache) view(l *gpu.Ledger, node *v1.Node) *gpu.NodeGPUs {
	return l.Node(node, c.gen[node.Name], slices.Values(c.pods[node.Name]))
}

// put adds the pod to its node, replacing any pod with the same UID.
func (c *podCache) put(pod *v1.Pod) {
	c.remove(pod.UID)
	c.pods[pod.Spec.NodeName] = append(c.pods[pod.Spec.NodeName], pod)
	c.clock++
	c.gen[pod.Spec.NodeName] = c.clock
}

func (c *podCache) remove(uid types.UID) {
	for node, pods := range c.pods {
		if i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return p.UID == uid }); i >= 0 {
			c.pods[node] = slices.Delete(slices.Clone(pods), i, i+1)
			c.clock++
			c.gen[node] = c.clock
		}
	}
}

func usedMilli(n *gpu.NodeGPUs) []int64 {
	out := make([]int64, n.Len())
	for i, u := range n.Used {
		out[i] = u.Milli
	}
	return out
}

func TestLedgerLifecycle(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	cache.view(l, node)
	a := gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 400, MemoryMiB: 1000}

	// Reserve: assume, and the cache holds the pod on the node, unannotated.
	if err := l.Assume("p1", a); err != nil {
		t.Fatal(err)
	}
	if err := l.Assume("p1", a); err == nil {
		t.Fatal("a pod was assumed twice")
	}
	if err := l.Assume("p9", gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}); err == nil {
		t.Fatal("assumed on a view that an assumption had changed")
	}
	cache.put(gt.MakeGPUPod("p1").UID("p1").Node("n").Obj())
	if got := usedMilli(cache.view(l, node)); got[1] != 400 {
		t.Fatalf("after assume: used %v", got)
	}
	if err := l.Assume("p2", gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 700}); err == nil {
		t.Fatal("assume beyond capacity succeeded")
	}
	// Bound with its annotation: counted from the annotation, the assumption is done.
	bound := gt.MakeGPUPod("p1").UID("p1").Node("n").Assigned(a).Obj()
	cache.put(bound)
	if got := usedMilli(cache.view(l, node)); got[1] != 400 {
		t.Fatalf("after bind: used %v", got)
	}
	if _, ok := l.Assumed("p1"); ok {
		t.Error("assumption kept after the pod was seen bound")
	}
	l.Forget("p1")
	if got := usedMilli(cache.view(l, node)); got[1] != 400 {
		t.Fatalf("Forget released a bound pod: used %v", got)
	}
	// A terminated pod releases its GPUs.
	done := bound.DeepCopy()
	done.Status.Phase = v1.PodSucceeded
	cache.put(done)
	if got := usedMilli(cache.view(l, node)); got[1] != 0 {
		t.Fatalf("after termination: used %v", got)
	}
	if err := l.Assume("p3", gpu.Assignment{Node: "other", Devices: []int{0}, Milli: 1000}); err == nil {
		t.Fatal("assume on a node never read succeeded")
	}
	if err := l.Assume("p4", gpu.Assignment{Node: "n", Devices: []int{7}, Milli: 1000}); err == nil {
		t.Fatal("assume of a GPU the node does not have succeeded")
	}
}

func TestLedgerCountsOnlyValidAssignments(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Obj()
	whole0 := gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}
	pods := []*v1.Pod{
		gt.MakeGPUPod("malformed").Node("n").Annotation(gpu.AnnotationAssigned, "gpus=zero").Obj(),
		gt.MakeGPUPod("other-node").Node("n").Assigned(gpu.Assignment{Node: "m", Devices: []int{1}, Milli: 1000}).Obj(),
		gt.MakeGPUPod("unknown-gpu").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{5}, Milli: 1000}).Obj(),
		// Two bound pods on one GPU are facts: both count, and the GPU has nothing free.
		gt.MakeGPUPod("x").Node("n").Assigned(whole0).Obj(),
		gt.MakeGPUPod("y").Node("n").Assigned(whole0).Obj(),
	}
	n := gpu.NewLedger().Node(node, 1, slices.Values(pods))
	if got := usedMilli(n); got[0] != 2000 || got[1] != 0 {
		t.Errorf("used = %v, want [2000 0]", got)
	}
	if n.FreeMilli(0) != 0 || n.FreeMilliTotal() != 1000 {
		t.Errorf("free milli: GPU 0 %d, node %d; want 0 and 1000", n.FreeMilli(0), n.FreeMilliTotal())
	}
}

// TestLedgerProperty drives a ledger with random sequences of assume, forget,
// bind, delete, node change and scheduler restart, and checks after every step
// that no GPU is allocated beyond its capacity and that the ledger agrees with
// one rebuilt from scratch from the same pods and assumptions.
func TestLedgerProperty(t *testing.T) {
	var policies []gpu.PolicyType // every registered policy
	for _, info := range gpu.Policies() {
		policies = append(policies, info.Type)
	}
	for seed := uint64(1); seed <= 20; seed++ {
		nodes := []*v1.Node{
			gt.MakeGPUNode("a100").GFD("A100", 8, 81920).Clique("c0").Obj(),
			gt.MakeGPUNode("t4").GFD("T4", 4, 16384).Obj(),
			gt.MakeGPUNode("mixed").Devices(
				gpu.Device{Index: 2, UUID: "GPU-2", Model: "H100", MemoryMiB: 81559, Group: "x"},
				gpu.Device{Index: 5, UUID: "GPU-5", Model: "H100", MemoryMiB: 81559, Group: "x"},
				gpu.Device{Index: 9, UUID: "GPU-9", Model: "L4", MemoryMiB: 23034, Group: "y"},
			).Obj(),
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		ledger, cache := gpu.NewLedger(), newPodCache()
		inFlight := map[types.UID]gpu.Assignment{}
		bound := map[types.UID]bool{}
		next := 0
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 4: // schedule a random pod: place, assume, hold it on the node
				d := gpu.Demand{Count: 1 + rng.IntN(3), Milli: 1000}
				if rng.IntN(2) == 0 {
					d = gpu.Demand{Count: 1, Milli: 1 + rng.Int64N(999), MemoryMiB: rng.Int64N(20000) * rng.Int64N(2)}
				}
				policy := gpu.MustPolicy(policies[rng.IntN(len(policies))],
					gpu.PolicyConfig{Weights: gpu.Weights{GPU: 1, Memory: rng.Int64N(2)}, Shapes: halfWholeHalfShare})
				n := cache.view(ledger, nodes[rng.IntN(len(nodes))])
				// The summaries' fast path must agree with the per-device loop,
				// which a model list that allows every model forces.
				if d.MemoryMiB == 0 {
					slow := d
					slow.Models = []string{"A100", "T4", "H100", "L4"}
					fast := gpu.Check(n, &gpu.Request{Demand: &d})
					slowFit := gpu.Check(n, &gpu.Request{Demand: &slow})
					if fast.Reasons != slowFit.Reasons || (fast.Reasons == 0 && fast.Free != slowFit.Free) {
						t.Fatalf("seed %d step %d: Check(%v) = %b %v, per device %b %v", seed, step, d, fast.Free, fast.Reasons, slowFit.Free, slowFit.Reasons)
					}
				}
				chosen, fit := policy.Place(n, &gpu.Request{Demand: &d})
				if !fit.OK() {
					continue
				}
				next++
				uid := types.UID("pod-" + strconv.Itoa(next))
				a := gpu.NewAssignment(n, &d, chosen)
				if err := ledger.Assume(uid, a); err != nil {
					t.Fatalf("seed %d step %d: Assume of a placement Place chose: %v", seed, step, err)
				}
				inFlight[uid] = a
				cache.put(gt.MakeGPUPod(string(uid)).UID(string(uid)).Node(a.Node).Obj())
			case op < 5: // an arbitrary assignment: must be refused rather than over-allocate
				node := nodes[rng.IntN(len(nodes))]
				cache.view(ledger, node)
				a := gpu.Assignment{Node: node.Name, Devices: []int{rng.IntN(10)}, Milli: 1 + rng.Int64N(1000), MemoryMiB: rng.Int64N(90000)}
				next++
				uid := types.UID("raw-" + strconv.Itoa(next))
				if ledger.Assume(uid, a) == nil {
					inFlight[uid] = a
					cache.put(gt.MakeGPUPod(string(uid)).UID(string(uid)).Node(a.Node).Obj())
				}
			case op < 6: // unreserve: forget, and the cache drops the pod
				if uid, ok := pick(rng, inFlight); ok {
					ledger.Forget(uid)
					cache.remove(uid)
					delete(inFlight, uid)
				}
			case op < 8: // bind: the pod comes back with its annotation
				if uid, ok := pick(rng, inFlight); ok {
					cache.put(gt.MakeGPUPod(string(uid)).UID(string(uid)).Node(inFlight[uid].Node).Assigned(inFlight[uid]).Obj())
					bound[uid] = true
					delete(inFlight, uid)
				}
			case op < 9: // a bound pod is deleted
				if uid, ok := pick(rng, bound); ok {
					cache.remove(uid)
					delete(bound, uid)
				}
			default: // a node object changes, or the scheduler restarts
				if rng.IntN(2) == 0 {
					i := rng.IntN(len(nodes))
					nodes[i] = nodes[i].DeepCopy()
				} else {
					// A new scheduler has nothing in flight: those pods go back to pending.
					for uid := range inFlight {
						cache.remove(uid)
					}
					clear(inFlight)
					ledger = gpu.NewLedger()
				}
			}
			fresh := gpu.NewLedger()
			for _, node := range nodes {
				got := cache.view(ledger, node)
				want := fresh.Node(node, 0, slices.Values(cache.pods[node.Name]))
				for _, a := range inFlight { // what the fresh ledger would count for pods in flight
					if a.Node == node.Name {
						for _, index := range a.Devices {
							i := slices.IndexFunc(want.Inventory.Devices, func(d gpu.Device) bool { return d.Index == index })
							want.Used[i].Milli += a.Milli
							if a.Milli < gpu.MilliPerGPU {
								want.Used[i].MemoryMiB += a.MemoryMiB
							}
						}
					}
				}
				for i, u := range got.Used {
					dev := got.Inventory.Devices[i]
					if u.Milli > gpu.MilliPerGPU || u.Milli < 0 || u.MemoryMiB > dev.MemoryMiB || u.MemoryMiB < 0 {
						t.Fatalf("seed %d step %d: node %s GPU %d over-allocated: %+v", seed, step, node.Name, dev.Index, u)
					}
					if u != want.Used[i] {
						t.Fatalf("seed %d step %d: node %s GPU %d: ledger %+v, rebuilt %+v", seed, step, node.Name, dev.Index, u, want.Used[i])
					}
				}
			}
		}
	}
}

func pick[V any](rng *rand.Rand, m map[types.UID]V) (types.UID, bool) {
	if len(m) == 0 {
		return "", false
	}
	keys := make([]types.UID, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // map order is random; sort for a reproducible pick
	return keys[rng.IntN(len(keys))], true
}

// TestLedgerHoldsUnplacedClaims: a pod on the node with a GPU demand but no
// assignment (nominated by preemption, or bound by another scheduler) holds
// the GPUs best-fit would give it.
func TestLedgerHoldsUnplacedClaims(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 4, 40960).Obj()
	pods := []*v1.Pod{
		gt.MakeGPUPod("ours").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 600}).Obj(),
		gt.MakeGPUPod("foreign").GPUs(2).Node("n").Obj(), // bound by another scheduler
		gt.MakeGPUPod("nominated").Milli(300).Obj(),      // not bound: a nominated pod
		gt.MakeGPUPod("no-gpu").CPU("2").Node("n").Obj(),
	}
	n := gpu.NewLedger().Node(node, 1, slices.Values(pods))
	// Whole GPUs go to the lowest fully free GPUs, 1 and 2; the share to the
	// tightest GPU that fits, GPU 0 (400 free).
	if got, want := usedMilli(n), []int64{900, 1000, 1000, 0}; !slices.Equal(got, want) {
		t.Errorf("used = %v, want %v", got, want)
	}
}

// TestLedgerDoubt follows a pod whose bind failed with its outcome unknown:
// the scheduler forgets the pod (Unreserve) and drops it from its cache, yet
// its GPUs stay held until the pod is seen bound (then its annotation
// counts) or the caller settles it.
func TestLedgerDoubt(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	cache.view(l, node)
	a := gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 600, MemoryMiB: 1000}
	if err := l.Assume("p1", a); err != nil {
		t.Fatal(err)
	}
	cache.put(gt.MakeGPUPod("p1").UID("p1").Node("n").Obj())
	cache.view(l, node)

	// The bind's answer is lost: Doubt, then the framework's Unreserve
	// (Forget) and the cache dropping the assumed pod.
	l.Doubt("p1")
	l.Forget("p1")
	cache.remove("p1")
	if got := usedMilli(cache.view(l, node)); got[1] != 600 {
		t.Fatalf("in doubt: used %v, want GPU 1 holding 600", got)
	}
	// 600 + 500 > 1000: a share that would fit only if p1's GPUs were free
	// is refused.
	if err := l.Assume("p2", gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 500}); err == nil {
		t.Fatal("a pod was given GPUs held by a pod in doubt")
	}

	// The binding had been written: the pod shows up bound, counted once.
	cache.put(gt.MakeGPUPod("p1").UID("p1").Node("n").Assigned(a).Obj())
	if got := usedMilli(cache.view(l, node)); got[1] != 600 {
		t.Fatalf("seen bound: used %v, want 600 (counted once)", got)
	}
	if d := l.Doubtful("p1"); len(d) > 0 {
		t.Errorf("still in doubt after the pod was seen bound: %v", d)
	}

	// A second pod in doubt that turns out unbound is settled: its GPUs free.
	b := gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}
	cache.view(l, node)
	if err := l.Assume("p3", b); err != nil {
		t.Fatal(err)
	}
	l.Doubt("p3")
	l.Forget("p3")
	if got := usedMilli(cache.view(l, node)); got[0] != 1000 {
		t.Fatalf("p3 in doubt: used %v", got)
	}
	// Retried, p3 fails again with other GPUs (the 400 left on GPU 1, beside
	// p1's 600): both doubts hold.
	cache.view(l, node)
	retry := gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 400}
	if err := l.Assume("p3", retry); err != nil {
		t.Fatal(err)
	}
	l.Doubt("p3")
	l.Forget("p3")
	if got := usedMilli(cache.view(l, node)); got[0] != 1000 || got[1] != 1000 {
		t.Fatalf("p3 in doubt twice: used %v, want [1000 1000]", got)
	}
	// A read shows p3 unbound: each failed bind is settled on its own.
	l.Settle("p3", b)
	if got := usedMilli(cache.view(l, node)); got[0] != 0 || got[1] != 1000 {
		t.Fatalf("p3's first doubt settled: used %v, want [0 1000]", got)
	}
	l.Settle("p3", retry)
	if got := usedMilli(cache.view(l, node)); got[1] != 600 {
		t.Fatalf("p3 settled: used %v, want GPU 1 back to p1's 600", got)
	}
	l.Doubt("p9") // not assumed: nothing happens
	if d := l.Doubtful("p9"); len(d) > 0 {
		t.Errorf("Doubt of a pod never assumed holds %v", d)
	}
}

// TestLedgerFrontCache checks the ledger's lock-free front cache against its
// views: it is allocated once the ledger holds a second node, and serves a
// node's current view only, through a replaced Node object and an
// assumption that makes the view stale.
func TestLedgerFrontCache(t *testing.T) {
	l := gpu.NewLedger()
	consistent := func(step string) {
		t.Helper()
		if name, bad := l.FrontMismatch(); bad {
			t.Fatalf("%s: the front cache holds an entry of node %s that is not its current one", step, name)
		}
	}
	// A ledger that has seen one node has no front cache: one built for a
	// single view allocates none.
	other := gt.MakeGPUNode("other").GFD("A100", 8, 40960).Obj()
	if got := l.Node(other, 1, slices.Values([]*v1.Pod(nil))).Len(); got != 8 {
		t.Fatalf("first node: %d GPUs, want 8", got)
	}
	if l.HasFront() {
		t.Fatal("a ledger holding one node's view allocated its front cache")
	}
	old := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Obj()
	if got := l.Node(old, 1, slices.Values([]*v1.Pod(nil))).Len(); got != 2 {
		t.Fatalf("second node: %d GPUs, want 2", got)
	}
	if !l.HasFront() {
		t.Fatal("a ledger holding two nodes' views has no front cache")
	}
	consistent("second node")

	// The node's object is replaced (its GPU count changed): the old object's
	// entry leaves the front cache.
	replaced := gt.MakeGPUNode("n").GFD("A100", 4, 40960).Obj()
	if got := l.Node(replaced, 2, slices.Values([]*v1.Pod(nil))).Len(); got != 4 {
		t.Fatalf("replaced node: %d GPUs, want 4", got)
	}
	consistent("replaced node")

	// An assumption makes the view stale: the next read of the same object
	// and generation sees the pod held there.
	a := gpu.Assignment{Node: "n", Devices: []int{3}, Milli: 1000}
	if err := l.Assume("p", a); err != nil {
		t.Fatal(err)
	}
	consistent("assume")
	pod := gt.MakeGPUPod("p").UID("p").Node("n").Obj()
	if got := usedMilli(l.Node(replaced, 2, slices.Values([]*v1.Pod{pod}))); got[3] != 1000 {
		t.Fatalf("after assume: used %v, want GPU 3 held", got)
	}
	consistent("read after assume")
}

// TestLedgerCountsModels: the ledger counts the GPUs of the nodes it read
// by model, hands out the same census until a node's GPUs change, and
// moves a node's GPUs when its inventory changes.
func TestLedgerCountsModels(t *testing.T) {
	l := gpu.NewLedger()
	if got := l.GPUsByModel(); got != nil {
		t.Fatalf("empty ledger: %v, want none", got)
	}
	t4 := gt.MakeGPUNode("t4").GFD("T4", 2, 0).Obj()
	t4.ResourceVersion = "1"
	l.Node(t4, 1, slices.Values([]*v1.Pod(nil)))
	l.Node(gt.MakeGPUNode("a100").GFD("A100", 8, 0).Obj(), 1, slices.Values([]*v1.Pod(nil)))
	l.Node(gt.MakeGPUNode("cpu").Obj(), 1, slices.Values([]*v1.Pod(nil)))
	first := l.GPUsByModel()
	if want := (gpu.ModelGPUs{{Model: "A100", GPUs: 8}, {Model: "T4", GPUs: 2}}); !slices.Equal(first, want) {
		t.Fatalf("census %v, want %v", first, want)
	}
	l.Node(t4, 2, slices.Values([]*v1.Pod(nil))) // the node's pods changed, not its GPUs
	status := t4.DeepCopy()                      // its status changed, not its GPUs
	status.ResourceVersion = "1b"
	l.Node(status, 3, slices.Values([]*v1.Pod(nil)))
	if again := l.GPUsByModel(); &again[0] != &first[0] {
		t.Error("the census was made again although no node's GPUs changed")
	}
	relabeled := gt.MakeGPUNode("t4").GFD("L4", 4, 0).Obj()
	relabeled.ResourceVersion = "2"
	l.Node(relabeled, 4, slices.Values([]*v1.Pod(nil)))
	if got, want := l.GPUsByModel(), (gpu.ModelGPUs{{Model: "A100", GPUs: 8}, {Model: "L4", GPUs: 4}}); !slices.Equal(got, want) {
		t.Errorf("after the node's T4s became 4 L4s: census %v, want %v", got, want)
	}
}
