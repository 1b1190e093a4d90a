package gpuplacement_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	t4   = "Tesla-T4"
)

// testCluster is a real framework over a real scheduler cache and snapshot,
// with GPUPlacement at all of its extension points and a fake API client for
// PreBind's patch.
type testCluster struct {
	fw       framework.Framework
	cache    cache.Cache
	snapshot *cache.Snapshot
	client   *fake.Clientset
	recorder *events.FakeRecorder
	logger   klog.Logger
	// plugin is the framework's GPUPlacement.
	plugin *gpuplacement.GPUPlacement
}

func newCluster(t *testing.T, args *config.GPUPlacementArgs, nodes []*v1.Node, pods []*v1.Pod) *testCluster {
	return newClusterBinding(t, args, nodes, pods, false)
}

// newClusterBinding is newCluster with GPUPlacement as the first bind plugin
// when gpuBindsFirst, else DefaultBinder alone.
func newClusterBinding(t testing.TB, args *config.GPUPlacementArgs, nodes []*v1.Node, pods []*v1.Pod, gpuBindsFirst bool, opts ...frameworkruntime.Option) *testCluster {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	c := &testCluster{cache: cache.New(ctx, nil, false, false), snapshot: cache.NewEmptySnapshot(), client: fake.NewClientset(), recorder: events.NewFakeRecorder(10), logger: logger}
	for _, n := range nodes {
		c.cache.AddNode(logger, n)
	}
	for _, p := range pods {
		if err := c.cache.AddPod(logger, p); err != nil {
			t.Fatal(err)
		}
	}
	c.refresh(t)
	factory := func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		var pl fwk.Plugin
		var err error
		if args == nil {
			pl, err = gpuplacement.New(ctx, nil, h)
		} else {
			pl, err = gpuplacement.New(ctx, args, h)
		}
		if err == nil {
			c.plugin = pl.(*gpuplacement.GPUPlacement)
		}
		return pl, err
	}
	extensions := []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve", "PreBind"}
	if gpuBindsFirst {
		extensions = append(extensions, "Bind")
	}
	fw, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(gpuplacement.Name, factory, extensions...),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "gpusched", append([]frameworkruntime.Option{
		frameworkruntime.WithSnapshotSharedLister(c.snapshot),
		frameworkruntime.WithClientSet(c.client),
		frameworkruntime.WithEventRecorder(c.recorder)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.fw = fw
	return c
}

// refresh takes a new snapshot of the cache, as each scheduling cycle does.
func (c *testCluster) refresh(t testing.TB) {
	if err := c.cache.UpdateSnapshot(c.logger, c.snapshot); err != nil {
		t.Fatal(err)
	}
}

func testNodes() []*v1.Node {
	return []*v1.Node{
		gt.MakeGPUNode("a100").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("t4").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("cpu").Obj(),
	}
}

// filter runs PreFilter and Filter for pod on every node, and returns each
// node's status code and reasons.
func filter(t *testing.T, c *testCluster, pod *v1.Pod) (map[string]string, *fwk.Status) {
	t.Helper()
	fw := c.fw
	ctx := context.Background()
	state := framework.NewCycleState()
	if _, status, _ := fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		return nil, status
	}
	nodeInfos, err := fw.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ni := range nodeInfos {
		status := fw.RunFilterPlugins(ctx, state, pod, ni)
		out[ni.Node().Name] = "Success: "
		if status != nil {
			out[ni.Node().Name] = status.Code().String() + ": " + strings.Join(status.Reasons(), ", ")
		}
	}
	return out, nil
}

func TestFilter(t *testing.T) {
	busy := gt.MakeGPUPod("busy").Node("t4").Assigned(gpu.Assignment{Node: "t4", Devices: []int{0, 1, 2}, Milli: 1000}).Obj()
	const (
		ok           = "Success: "
		noGPUs       = "UnschedulableAndUnresolvable: node has no GPUs"
		modelNotOK   = "UnschedulableAndUnresolvable: GPU model not allowed"
		memoryTooLow = "UnschedulableAndUnresolvable: GPU memory below request"
	)
	tests := []struct {
		name string
		pod  *v1.Pod
		want map[string]string
	}{
		{
			name: "two whole GPUs: the T4 node has one free",
			pod:  gt.MakeGPUPod("p").GPUs(2).Obj(),
			want: map[string]string{"a100": ok, "t4": "Unschedulable: insufficient free GPUs", "cpu": noGPUs},
		},
		{
			name: "model constraint",
			pod:  gt.MakeGPUPod("p").GPUs(1).Models(a100).Obj(),
			want: map[string]string{"a100": ok, "t4": modelNotOK, "cpu": noGPUs},
		},
		{
			name: "memory constraint on a share",
			pod:  gt.MakeGPUPod("p").Milli(300).GPUMemory("20Gi").Obj(),
			want: map[string]string{"a100": ok, "t4": memoryTooLow, "cpu": noGPUs},
		},
		{
			name: "more GPUs than any node has",
			pod:  gt.MakeGPUPod("p").GPUs(9).Obj(),
			want: map[string]string{"a100": "UnschedulableAndUnresolvable: too few GPUs on node", "t4": "UnschedulableAndUnresolvable: too few GPUs on node", "cpu": noGPUs},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status := filter(t, newCluster(t, nil, testNodes(), []*v1.Pod{busy}), tt.pod)
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

func TestPreFilter(t *testing.T) {
	c := newCluster(t, nil, testNodes(), nil)
	// A pod without GPU demand skips the plugin: it passes Filter everywhere.
	got, status := filter(t, c, gt.MakeGPUPod("plain").CPU("1").Obj())
	if status != nil || got["cpu"] != "Success: " {
		t.Errorf("plain pod: status %v, filter %v", status, got)
	}
	// A malformed annotation is rejected with a message naming it.
	_, status = filter(t, c, gt.MakeGPUPod("bad").Annotation(gpu.AnnotationMilli, "half").Obj())
	if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), gpu.AnnotationMilli) || !strings.Contains(status.Message(), `"half"`) {
		t.Errorf("malformed pod: %v", status)
	}
}

func TestScore(t *testing.T) {
	// Three 4×A100 nodes: "empty", "quarter" (GPU 0 at 250 milli), "half" (GPU 0 at 500).
	nodes := []*v1.Node{
		gt.MakeGPUNode("empty").GFD(a100, 4, 81920).Obj(),
		gt.MakeGPUNode("quarter").GFD(a100, 4, 81920).Obj(),
		gt.MakeGPUNode("half").GFD(a100, 4, 81920).Obj(),
	}
	pods := []*v1.Pod{
		gt.MakeGPUPod("q").Node("quarter").Assigned(gpu.Assignment{Node: "quarter", Devices: []int{0}, Milli: 250}).Obj(),
		gt.MakeGPUPod("h").Node("half").Assigned(gpu.Assignment{Node: "half", Devices: []int{0}, Milli: 500}).Obj(),
	}
	share := gt.MakeGPUPod("share").Milli(250).Obj()
	tests := []struct {
		name     string
		strategy config.ScoringStrategyType
		want     map[string]int64
	}{
		{
			// Engine: empty 1e6×250/4000 = 62500, quarter 1e6×500/4000 = 125000,
			// half 1e6×750/4000 = 187500; min-max to 0..100: 0, 50, 100.
			name: "best-fit", strategy: gpu.PolicyBestFit,
			want: map[string]int64{"empty": 0, "quarter": 50, "half": 100},
		},
		{
			// Engine: 1e6 minus the above: 937500, 875000, 812500 → 100, 50, 0.
			name: "spread", strategy: gpu.PolicySpread,
			want: map[string]int64{"empty": 100, "quarter": 50, "half": 0},
		},
		{
			// Engine: empty band 0: 62500/3 = 20833; quarter band 2: 666666 + 125000/3 = 708332;
			// half band 2: 666666 + 187500/3 = 729166. Min-max: 0, (708332−20833)×100/708333 = 97, 100.
			name: "packing", strategy: gpu.PolicyPacking,
			want: map[string]int64{"empty": 0, "quarter": 97, "half": 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{
				Type: tt.strategy, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}}}
			fw := newCluster(t, args, nodes, pods).fw
			ctx, state := context.Background(), framework.NewCycleState()
			if _, status, _ := fw.RunPreFilterPlugins(ctx, state, share); !status.IsSuccess() {
				t.Fatal(status)
			}
			nodeInfos, _ := fw.SnapshotSharedLister().NodeInfos().List()
			if status := fw.RunPreScorePlugins(ctx, state, share, nodeInfos); !status.IsSuccess() {
				t.Fatal(status)
			}
			scores, status := fw.RunScorePlugins(ctx, state, share, nodeInfos)
			if !status.IsSuccess() {
				t.Fatal(status)
			}
			for _, s := range scores {
				if s.TotalScore != tt.want[s.Name] {
					t.Errorf("node %s: score %d, want %d", s.Name, s.TotalScore, tt.want[s.Name])
				}
			}
		})
	}
}

// schedule runs one scheduling cycle for pod on node, as the scheduler does:
// a new snapshot, PreFilter, Filter, the cache assumes the pod, Reserve,
// PreBind. It returns the assignment PreBind wrote.
func (c *testCluster) schedule(t *testing.T, pod *v1.Pod, node string) (fwk.CycleState, string) {
	t.Helper()
	return c.cycle(t, pod, node, true)
}

// reserve is schedule up to Reserve: a cycle that ends before any bind is
// sent (a Permit plugin rejects the pod). It returns the assignment Reserve
// made.
func (c *testCluster) reserve(t *testing.T, pod *v1.Pod, node string) (fwk.CycleState, string) {
	t.Helper()
	return c.cycle(t, pod, node, false)
}

func (c *testCluster) cycle(t *testing.T, pod *v1.Pod, node string, preBind bool) (fwk.CycleState, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.refresh(t)
	state := framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	nodeInfo, err := c.snapshot.NodeInfos().Get(node)
	if err != nil {
		t.Fatal(err)
	}
	if status := c.fw.RunFilterPlugins(ctx, state, pod, nodeInfo); !status.IsSuccess() {
		t.Fatalf("pod %s does not fit node %s: %v", pod.Name, node, status)
	}
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	if err := c.cache.AssumePod(c.logger, assumed); err != nil {
		t.Fatal(err)
	}
	if status := c.fw.RunReservePluginsReserve(ctx, state, pod, node); !status.IsSuccess() {
		t.Fatal(status)
	}
	if !preBind {
		a, _ := gpuplacement.AssignmentFrom(state)
		return state, a.String()
	}
	if status := c.fw.RunPreBindPlugins(ctx, state, pod, node); !status.IsSuccess() {
		t.Fatal(status)
	}
	got, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return state, got.Annotations[gpu.AnnotationAssigned]
}

// newTwoGPUCluster is a node "n" of two A100s, with a bound pod holding
// 600 milli-GPU of GPU 1 (400 left) and GPU 0 free.
func newTwoGPUCluster(t *testing.T) *testCluster {
	t.Helper()
	nodes, pods := twoGPUNode()
	return newCluster(t, nil, nodes, pods)
}

// twoGPUNode is newTwoGPUCluster's node and pod.
func twoGPUNode() ([]*v1.Node, []*v1.Pod) {
	nodes := []*v1.Node{gt.MakeGPUNode("n").Devices(
		gpu.Device{Index: 0, UUID: "GPU-0", Model: a100, MemoryMiB: 81920},
		gpu.Device{Index: 1, UUID: "GPU-1", Model: a100, MemoryMiB: 81920},
	).Obj()}
	existing := gt.MakeGPUPod("existing").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{1}, Milli: 600}).Obj()
	return nodes, []*v1.Pod{existing}
}

// unreserve is the framework after a failed cycle: Unreserve, then the
// scheduler's cache forgetting the assumed pod.
func (c *testCluster) unreserve(t *testing.T, state fwk.CycleState, pod *v1.Pod, node string) {
	t.Helper()
	c.fw.RunReservePluginsUnreserve(context.Background(), state, pod, node)
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	if err := c.cache.ForgetPod(c.logger, assumed); err != nil {
		t.Fatal(err)
	}
}

func TestReservePreBindUnreserve(t *testing.T) {
	c := newTwoGPUCluster(t)

	// Best-fit puts the share on GPU 1, which has exactly 400 free. Its
	// cycle ends after Reserve (a Permit plugin rejects it): no bind was
	// sent, so Unreserve gives its GPUs back at once.
	first := gt.MakeGPUPod("first").Milli(400).GPUMemory("1024").Obj()
	firstState, got := c.reserve(t, first, "n")
	if want := "node=n;gpus=1;milli=400;memory=1024;uuids=GPU-1"; got != want {
		t.Errorf("first: assignment %q, want %q", got, want)
	}
	// While the first is assumed, GPU 1 is full: the next share goes to GPU 0.
	if _, got := c.schedule(t, gt.MakeGPUPod("second").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=0;") {
		t.Errorf("second: annotation %q, want GPU 0", got)
	}
	// Unreserve (and the cache forgetting the pod) gives GPU 1's 400 back:
	// the tightest fit for a third share is GPU 1 again (GPU 0 has 600 free).
	c.unreserve(t, firstState, first, "n")
	if _, got := c.schedule(t, gt.MakeGPUPod("third").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=1;") {
		t.Errorf("third: annotation %q, want GPU 1", got)
	}
}

// TestFilterWithoutVictims is what preemption asks: would the pod fit if
// these pods were gone? It clones the node's NodeInfo, removes the victim, and
// filters again; the ledger must see the clone's pods, not the cached view.
func TestFilterWithoutVictims(t *testing.T) {
	victim := gt.MakeGPUPod("victim").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}).Obj()
	c := newCluster(t, nil, []*v1.Node{gt.MakeGPUNode("n").GFD(a100, 1, 81920).Obj()}, []*v1.Pod{victim})
	ctx, state := context.Background(), framework.NewCycleState()
	pod := gt.MakeGPUPod("preemptor").GPUs(1).Obj()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	nodeInfo, _ := c.snapshot.NodeInfos().Get("n")
	if status := c.fw.RunFilterPlugins(ctx, state, pod, nodeInfo); status.Code() != fwk.Unschedulable {
		t.Fatalf("with the victim: %v, want Unschedulable (preemption may help)", status)
	}
	without := nodeInfo.Snapshot()
	if err := without.RemovePod(c.logger, victim); err != nil {
		t.Fatal(err)
	}
	if status := c.fw.RunFilterPlugins(ctx, state, pod, without); !status.IsSuccess() {
		t.Errorf("without the victim: %v, want Success", status)
	}
	if status := c.fw.RunFilterPlugins(ctx, state, pod, nodeInfo); status.Code() != fwk.Unschedulable {
		t.Errorf("the real node again: %v, want Unschedulable", status)
	}
}

// TestBind: as the first bind plugin, GPUPlacement binds a GPU pod with its
// assignment in the Binding (and PreBind has nothing to do); a pod without
// GPUs falls through to DefaultBinder.
func TestBind(t *testing.T) {
	ctx := context.Background()
	nodes := []*v1.Node{gt.MakeGPUNode("n").GFD(a100, 2, 81920).Obj()}
	c := newClusterBinding(t, nil, nodes, nil, true)

	pod := gt.MakeGPUPod("share").Milli(500).Obj()
	if _, err := c.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := c.fw.RunReservePluginsReserve(ctx, state, pod, "n"); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := c.fw.RunPreBindPreFlights(ctx, state, pod, "n"); !status.IsSkip() {
		t.Errorf("PreBindPreFlight = %v, want Skip: Bind writes the annotation", status)
	}
	if status := c.fw.RunBindPlugins(ctx, state, pod, "n"); !status.IsSuccess() {
		t.Fatal(status)
	}
	plain := gt.MakeGPUPod("plain").CPU("1").Obj()
	if _, err := c.client.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plainState := framework.NewCycleState()
	c.fw.RunPreFilterPlugins(ctx, plainState, plain)
	if status := c.fw.RunBindPlugins(ctx, plainState, plain, "n"); !status.IsSuccess() {
		t.Fatal(status)
	}

	var bindings []*v1.Binding
	for _, action := range c.client.Actions() {
		if create, ok := action.(clienttesting.CreateAction); ok && action.GetSubresource() == "binding" {
			bindings = append(bindings, create.GetObject().(*v1.Binding))
		}
		if action.GetVerb() == "patch" {
			t.Errorf("unexpected %s of %s: the Binding carries the annotation", action.GetVerb(), action.GetResource().Resource)
		}
	}
	if len(bindings) != 2 {
		t.Fatalf("%d bindings, want 2", len(bindings))
	}
	if got, want := bindings[0].Annotations[gpu.AnnotationAssigned], "node=n;gpus=0;milli=500;memory=0"; got != want || bindings[0].Target.Name != "n" {
		t.Errorf("GPU pod's binding: annotation %q to %s, want %q to n", got, bindings[0].Target.Name, want)
	}
	if _, ok := bindings[1].Annotations[gpu.AnnotationAssigned]; ok || bindings[1].Name != "plain" {
		t.Errorf("plain pod's binding %+v: want DefaultBinder's, without an assignment", bindings[1].ObjectMeta)
	}
}

// TestInvalidInventoryEvent: a node whose GPU annotation is malformed fails
// Filter with the stable reason, and gets one Warning event naming the
// annotation, however many pods try it.
func TestInvalidInventoryEvent(t *testing.T) {
	bad := gt.MakeGPUNode("bad").Annotation(gpu.AnnotationDevices, `[{"index":0},{"index":0}]`).Obj()
	bad.ResourceVersion = "7"
	c := newCluster(t, nil, []*v1.Node{bad}, nil)
	for i := range 3 {
		got, status := filter(t, c, gt.MakeGPUPod(fmt.Sprintf("p%d", i)).GPUs(1).Obj())
		if status != nil || got["bad"] != "UnschedulableAndUnresolvable: node GPU inventory invalid" {
			t.Fatalf("filter: %v %v", status, got)
		}
	}
	if n := len(c.recorder.Events); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if ev := <-c.recorder.Events; !strings.Contains(ev, "InvalidGPUInventory") || !strings.Contains(ev, gpu.AnnotationDevices) || !strings.Contains(ev, "listed twice") {
		t.Errorf("event %q does not name the annotation and the problem", ev)
	}
}

// TestScoreHostAware: a policy that weighs CPU (gpu.PolicyInfo.HostAware) scores pods
// without GPUs too, from the node's free CPU and the cluster's largest node,
// and Reserve gives them no GPUs.
func TestScoreHostAware(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("big").GFD(t4, 2, 16384).CPU("64").Obj(),
		gt.MakeGPUNode("small").GFD(t4, 2, 16384).CPU("16").Obj(),
	}
	cpuOnly := gt.MakeGPUPod("cpu-only").CPU("8").Obj()
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{
		Type: gpu.PolicyBestFitCPUGPU, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}}}
	c := newCluster(t, args, nodes, nil)
	ctx, state := context.Background(), framework.NewCycleState()
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, cpuOnly); !status.IsSuccess() {
		t.Fatal(status)
	}
	nodeInfos, _ := c.fw.SnapshotSharedLister().NodeInfos().List()
	if status := c.fw.RunPreScorePlugins(ctx, state, cpuOnly, nodeInfos); !status.IsSuccess() {
		t.Fatal(status)
	}
	scores, status := c.fw.RunScorePlugins(ctx, state, cpuOnly, nodeInfos)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	// Largest node: 64 CPUs, 2 GPUs (2000 milli-GPU).
	// big:   int(100 × (1 − ½·(64000−8000)/64000 − ½·2000/2000)) = int(6.25) = 6
	// small: int(100 × (1 − ½·(16000−8000)/64000 − ½·2000/2000)) = int(43.75) = 43
	// Min-max to 0..100: big 0, small 100.
	want := map[string]int64{"big": 0, "small": 100}
	for _, s := range scores {
		if s.TotalScore != want[s.Name] {
			t.Errorf("node %s: score %d, want %d", s.Name, s.TotalScore, want[s.Name])
		}
	}
	if status := c.fw.RunReservePluginsReserve(ctx, state, cpuOnly, "small"); !status.IsSuccess() {
		t.Fatal(status)
	}
	if a, ok := gpuplacement.AssignmentFrom(state); ok {
		t.Errorf("a pod without GPUs was given %v", a)
	}
}

// TestUnreserveAfterLostBind: the pod's binding was written but its answer
// lost (the API server restarted mid-request), so the framework unreserves a
// pod that is in fact bound. Its GPUs must stay held: a read of the pod shows
// it bound to the node, and the next share must not be given them.
func TestUnreserveAfterLostBind(t *testing.T) {
	c := newTwoGPUCluster(t)
	ctx := context.Background()

	// first: 400 on GPU 1 (600 + 400 = 1000, full); second: 400 on GPU 0.
	first := gt.MakeGPUPod("first").Milli(400).Obj()
	firstState, got := c.schedule(t, first, "n")
	if !strings.Contains(got, "gpus=1;") {
		t.Fatalf("first: annotation %q, want GPU 1", got)
	}
	if _, got := c.schedule(t, gt.MakeGPUPod("second").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=0;") {
		t.Fatalf("second: annotation %q, want GPU 0", got)
	}
	// The binding went through on the API server; the scheduler saw an error.
	bound, err := c.client.CoreV1().Pods("default").Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound.Spec.NodeName = "n"
	if _, err := c.client.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.unreserve(t, firstState, first, "n")
	// GPU 1 is still first's: with it released, best fit would put a 400
	// share there (400 free, tighter than GPU 0's 600); held, only GPU 0
	// (400 used, 600 free) has room.
	if _, got := c.schedule(t, gt.MakeGPUPod("third").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=0;") {
		t.Errorf("third: annotation %q, want GPU 0: GPU 1 is held by the pod whose bind answer was lost", got)
	}
}

// TestPreBindRemovesStaleAssignment: a pod that holds no GPUs in this cycle
// but still carries gpusched.io/gpu-assigned (a bind that failed after
// PreBind, or a demand removed since) loses it before it binds, whichever
// plugin binds: the node agent would give its containers those GPUs, which
// may be another pod's by now. A pod with GPUs gets its fresh assignment.
func TestPreBindRemovesStaleAssignment(t *testing.T) {
	stale := gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}
	for _, gpuBindsFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("GPUPlacement binds first: %v", gpuBindsFirst), func(t *testing.T) {
			ctx := context.Background()
			c := newClusterBinding(t, nil, []*v1.Node{gt.MakeGPUNode("n").GFD(a100, 2, 81920).Obj()}, nil, gpuBindsFirst)
			pod := gt.MakeGPUPod("no-longer-gpu").CPU("1").Assigned(stale).Obj()
			if _, err := c.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			c.fw.RunPreFilterPlugins(ctx, state, pod)
			if status := c.fw.RunReservePluginsReserve(ctx, state, pod, "n"); !status.IsSuccess() {
				t.Fatal(status)
			}
			if status := c.fw.RunPreBindPreFlights(ctx, state, pod, "n"); status.IsSkip() {
				t.Fatalf("PreBindPreFlight skips a pod that carries a stale assignment")
			}
			if status := c.fw.RunPreBindPlugins(ctx, state, pod, "n"); !status.IsSuccess() {
				t.Fatal(status)
			}
			got, err := c.client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Annotations[gpu.AnnotationAssigned]; ok {
				t.Errorf("the pod still carries %s %q before it binds", gpu.AnnotationAssigned, v)
			}
		})
	}
}

// TestPreBindPatchCarriesUID: PreBind's patch names the pod's UID, which the
// API server takes as a precondition, so a pod deleted and created again
// under the same name (a StatefulSet's) meanwhile is not given the GPUs
// chosen for the old one.
func TestPreBindPatchCarriesUID(t *testing.T) {
	c := newTwoGPUCluster(t)
	pod := gt.MakeGPUPod("web-0").Milli(400).Obj()
	c.schedule(t, pod, "n")
	var patches []string
	for _, action := range c.client.Actions() {
		if p, ok := action.(clienttesting.PatchAction); ok && p.GetName() == "web-0" {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if len(patches) != 1 || !strings.Contains(patches[0], `"uid":"`+string(pod.UID)+`"`) {
		t.Errorf("PreBind's patches %q, want one naming uid %s", patches, pod.UID)
	}
}

// TestFailedBindClearsAssignment: PreBind wrote the pod's assignment and the
// bind failed; once a read of the pod says it is not bound, its GPUs are
// free again, and the pod no longer names them, so a later bind without
// GPUPlacement cannot hand it GPUs that are another pod's by then.
func TestFailedBindClearsAssignment(t *testing.T) {
	c := newTwoGPUClusterSettling(t, settleAfterInTests)
	pod := gt.MakeGPUPod("unlucky").Milli(400).Obj()
	state, written := c.schedule(t, pod, "n")
	if written == "" {
		t.Fatal("PreBind wrote no assignment")
	}
	// The bind plugin failed: the framework unreserves. Once the bind is
	// settled (the pod read unbound after the settle-after), its GPUs are
	// free and the pod no longer names them.
	c.fw.RunReservePluginsUnreserve(context.Background(), state, pod, "n")
	c.waitUnassigned(t, pod)
}

// settleAfterInTests is the bindSettleAfter of the tests that follow a bind
// in doubt to its end.
const settleAfterInTests = 300 * time.Millisecond

// newTwoGPUClusterSettling is newTwoGPUCluster with the plugin's
// bindSettleAfter set (through the versioned args, as a configuration
// file sets it).
func newTwoGPUClusterSettling(t *testing.T, settleAfter time.Duration) *testCluster {
	t.Helper()
	args, err := load.GPUPlacementArgsFromYAML([]byte("bindSettleAfter: " + settleAfter.String()))
	if err != nil {
		t.Fatal(err)
	}
	nodes, pods := twoGPUNode()
	return newCluster(t, args, nodes, pods)
}

// waitUnassigned waits until the API server's copy of pod has no
// assignment: the plugin settled its failed bind as "not bound".
func (c *testCluster) waitUnassigned(t *testing.T, pod *v1.Pod) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := got.Annotations[gpu.AnnotationAssigned]
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the failed bind the unbound pod still names %q", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostBindHeldUntilSettled: a bind that failed without saying whether
// it was stored keeps its GPUs until the settle-after has passed, even
// though the pod reads unbound at once: the write may still commit (an API
// server that accepted it finishes it within its request timeout), and
// GPUs handed out meanwhile would end up on two pods. The engine's rule
// (gpu.Ledger.SettleBind), which the extender follows too.
func TestLostBindHeldUntilSettled(t *testing.T) {
	c := newTwoGPUClusterSettling(t, settleAfterInTests)
	// first: 400 on GPU 1 (600 + 400 = 1000, full).
	first := gt.MakeGPUPod("first").Milli(400).Obj()
	state, got := c.schedule(t, first, "n")
	if !strings.Contains(got, "gpus=1;") {
		t.Fatalf("first: annotation %q, want GPU 1", got)
	}
	start := time.Now()
	c.unreserve(t, state, first, "n")
	// In doubt: GPU 1 stays full, so a 400 share goes to GPU 0 (0 used).
	if _, got := c.schedule(t, gt.MakeGPUPod("second").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=0;") {
		t.Fatalf("second, %v after the failed bind: annotation %q, want GPU 0: GPU 1 is held until the bind is settled", time.Since(start), got)
	}
	c.waitUnassigned(t, first)
	if waited := time.Since(start); waited < settleAfterInTests {
		t.Errorf("settled %v after the failed bind, before the settle-after of %v", waited, settleAfterInTests)
	}
	// Settled: GPU 1 has 400 free, GPU 0 600; best fit takes GPU 1.
	if _, got := c.schedule(t, gt.MakeGPUPod("third").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=1;") {
		t.Errorf("third, after the bind was settled: annotation %q, want GPU 1", got)
	}
}

// TestRefusedBindReleasesAtOnce: a Binding the API server refused (403)
// stored nothing, so its GPUs are free at once, without waiting out the
// settle-after (left at its default of 60s here).
func TestRefusedBindReleasesAtOnce(t *testing.T) {
	nodes, pods := twoGPUNode()
	c := newClusterBinding(t, nil, nodes, pods, true)
	c.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods/binding"}, "first", errors.New("not allowed"))
	})
	ctx := context.Background()
	first := gt.MakeGPUPod("first").Milli(400).Obj()
	state, _ := c.schedule(t, first, "n")
	if status := c.fw.RunBindPlugins(ctx, state, first, "n"); status.IsSuccess() {
		t.Fatal("the bind succeeded; the API server refused it")
	}
	c.unreserve(t, state, first, "n")
	// Released: GPU 1 has 400 free again, the best fit for a 400 share.
	if _, got := c.schedule(t, gt.MakeGPUPod("second").Milli(400).Obj(), "n"); !strings.Contains(got, "gpus=1;") {
		t.Errorf("second: annotation %q, want GPU 1: a refused bind holds nothing", got)
	}
}
