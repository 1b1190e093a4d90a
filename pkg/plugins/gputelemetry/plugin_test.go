package gputelemetry_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	configv1 "github.com/gpusched/gpusched/pkg/apis/config/v1"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gputelemetry"
	"github.com/gpusched/gpusched/pkg/telemetry"
)

func TestMain(m *testing.M) {
	metrics.Register() // the scheduler cache reports to these
	os.Exit(m.Run())
}

const a100 = "NVIDIA-A100-SXM4-80GB"

// fixedSource serves one snapshot; unit tests only.
type fixedSource struct{ snap *telemetry.Snapshot }

func (s *fixedSource) Latest() *telemetry.Snapshot { return s.snap }

// testCluster is a real framework over a real scheduler cache, with
// GPUPlacement (BestFit) and GPUTelemetry reading a fixed snapshot at a fixed
// clock; GPUTelemetry filters first.
type testCluster struct {
	fw       framework.Framework
	cache    cache.Cache
	snapshot *cache.Snapshot
	recorder *events.FakeRecorder
	logger   klog.Logger
	now      time.Time
}

// sampledAt is the snapshots' time; the default args' maxAge is 1m.
var sampledAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newCluster(t testing.TB, src telemetry.Source, now time.Time, nodes ...*v1.Node) *testCluster {
	t.Helper()
	return newClusterWith(t, true, nil, src, now, nodes...)
}

// newClusterWith is newCluster, without GPUPlacement unless placement, and
// with GPUTelemetry's args (nil for the defaults).
func newClusterWith(t testing.TB, placement bool, args *config.GPUTelemetryArgs, src telemetry.Source, now time.Time, nodes ...*v1.Node) *testCluster {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	c := &testCluster{cache: cache.New(ctx, nil, false, false), snapshot: cache.NewEmptySnapshot(),
		recorder: events.NewFakeRecorder(10), logger: logger, now: now}
	for _, n := range nodes {
		c.cache.AddNode(logger, n)
	}
	c.refresh(t)
	plugins := []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensionsWithWeight(gputelemetry.Name, 5, func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			factory := gputelemetry.NewWithSource(src, func() time.Time { return c.now })
			if args == nil {
				return factory(ctx, nil, h)
			}
			return factory(ctx, args, h)
		}, "PreFilter", "Filter", "PreScore", "Score"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}
	if placement {
		plugins = append(plugins, tf.RegisterPluginAsExtensions(gpuplacement.Name, func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			return gpuplacement.New(ctx, bestFitArgs(), h)
		}, "PreFilter", "Filter", "PreScore", "Score", "Reserve"))
	}
	fw, err := tf.NewFramework(ctx, plugins, "gpusched",
		frameworkruntime.WithSnapshotSharedLister(c.snapshot),
		frameworkruntime.WithClientSet(fake.NewClientset()),
		frameworkruntime.WithEventRecorder(c.recorder))
	if err != nil {
		t.Fatal(err)
	}
	c.fw = fw
	return c
}

func (c *testCluster) refresh(t testing.TB) {
	if err := c.cache.UpdateSnapshot(c.logger, c.snapshot); err != nil {
		t.Fatal(err)
	}
}

// result is one scheduling cycle's outcome.
type result struct {
	node     string
	devices  []int
	filtered map[string]string     // node -> reasons, for nodes Filter rejected
	scores   map[string]int64      // node -> GPUTelemetry's normalized score × its weight 5
	status   *fwk.Status           // PreFilter's or Reserve's failure
	state    *framework.CycleState // for inspection
}

// schedule runs one cycle for pod: PreFilter, Filter, PreScore, Score,
// picking the best total (ties to the first node by name), Reserve. The
// reserved pod is added to the cache as bound, so the next cycle sees it.
func (c *testCluster) schedule(t *testing.T, pod *v1.Pod) result {
	t.Helper()
	ctx := klog.NewContext(context.Background(), c.logger)
	state := framework.NewCycleState()
	r := result{filtered: map[string]string{}, scores: map[string]int64{}, state: state}
	if _, status, _ := c.fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		r.status = status
		return r
	}
	all, err := c.snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	var feasible []fwk.NodeInfo
	for _, ni := range all {
		if status := c.fw.RunFilterPlugins(ctx, state, pod, ni); !status.IsSuccess() {
			r.filtered[ni.Node().Name] = strings.Join(status.Reasons(), "; ")
			continue
		}
		feasible = append(feasible, ni)
	}
	if len(feasible) == 0 {
		return r
	}
	if status := c.fw.RunPreScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
		t.Fatal(status)
	}
	scores, status := c.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	slices.SortFunc(scores, func(a, b fwk.NodePluginScores) int { return strings.Compare(a.Name, b.Name) })
	best := scores[0]
	for _, s := range scores {
		for _, ps := range s.Scores {
			if ps.Name == gputelemetry.Name {
				r.scores[s.Name] = ps.Score
			}
		}
		if s.TotalScore > best.TotalScore {
			best = s
		}
	}
	if status := c.fw.RunReservePluginsReserve(ctx, state, pod, best.Name); !status.IsSuccess() {
		r.status = status
		return r
	}
	a, _ := gpuplacement.AssignmentFrom(state)
	r.node, r.devices = best.Name, a.Devices
	bound := pod.DeepCopy()
	bound.Spec.NodeName = best.Name
	bound.Annotations = map[string]string{gpu.AnnotationAssigned: a.String()}
	if err := c.cache.AddPod(c.logger, bound); err != nil {
		t.Fatal(err)
	}
	c.refresh(t)
	return r
}

func gpuSample(index int, uuid string, kv ...any) telemetry.GPU {
	g := telemetry.GPU{UUID: uuid, Index: index}
	for i := 0; i < len(kv); i += 2 {
		g.Values.Set(kv[i].(telemetry.Signal), kv[i+1].(float64))
	}
	return g
}

func twoGPUNode(name string) *v1.Node {
	return gt.MakeGPUNode(name).Devices(
		gpu.Device{Index: 0, UUID: "GPU-" + name + "0", Model: a100, MemoryMiB: 81920},
		gpu.Device{Index: 1, UUID: "GPU-" + name + "1", Model: a100, MemoryMiB: 81920}).Obj()
}

func TestBusyNodesScoreLower(t *testing.T) {
	snap := &telemetry.Snapshot{Time: sampledAt, HealthWindow: 10 * time.Minute, Nodes: map[string]*telemetry.Node{
		"a": {GPUs: []telemetry.GPU{gpuSample(0, "GPU-a0", telemetry.GPUUtil, 90.0), gpuSample(1, "GPU-a1", telemetry.GPUUtil, 90.0)}},
		"b": {GPUs: []telemetry.GPU{gpuSample(0, "GPU-b0", telemetry.GPUUtil, 10.0), gpuSample(1, "GPU-b1", telemetry.GPUUtil, 50.0)}},
	}}
	tests := []struct {
		name       string
		now        time.Time
		annotation string
		wantNode   string
		wantScores map[string]int64
	}{
		{
			name: "fresh telemetry", now: sampledAt.Add(30 * time.Second), wantNode: "b",
			// Default weights: utilization 3, memory 2, video 1, power 1, dram 1 (sum 8); only
			// utilization is sampled, the rest rate 0.5. Best GPU for one GPU:
			// a: (3×0.1 + 5×0.5)/8 = 0.35 → 350000; b: (3×0.9 + 5×0.5)/8 = 0.65 → 650000.
			// Min-max to 0..100: a 0, b 100; × weight 5: a 0, b 500.
			wantScores: map[string]int64{"a": 0, "b": 500},
		},
		{
			name: "stale telemetry: no preference", now: sampledAt.Add(2 * time.Minute), wantNode: "a",
			// Every part 0.5 on both nodes: equal raw scores rescale to 100 each; × 5 = 500.
			wantScores: map[string]int64{"a": 500, "b": 500},
		},
		{
			name: "a malformed sensitivity is ignored, with an event", now: sampledAt.Add(30 * time.Second), annotation: "fast", wantNode: "b",
			wantScores: map[string]int64{"a": 0, "b": 500},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, &fixedSource{snap}, tt.now, twoGPUNode("a"), twoGPUNode("b"))
			pod := gt.MakeGPUPod("p").GPUs(1).Annotation(telemetry.AnnotationSensitiveTo, tt.annotation).Obj()
			r := c.schedule(t, pod)
			if r.node != tt.wantNode {
				t.Errorf("pod on %q (status %v), want %s", r.node, r.status, tt.wantNode)
			}
			for node, want := range tt.wantScores {
				if r.scores[node] != want {
					t.Errorf("%s: GPUTelemetry score %d, want %d", node, r.scores[node], want)
				}
			}
			if tt.annotation != "" {
				select {
				case ev := <-c.recorder.Events:
					for _, part := range []string{"InvalidSensitivity", telemetry.AnnotationSensitiveTo, `"fast"`, "compute-bound, memory-bound, power, video"} {
						if !strings.Contains(ev, part) {
							t.Errorf("event %q does not name %q", ev, part)
						}
					}
				default:
					t.Error("no event for the malformed annotation")
				}
			}
		})
	}
}

// TestSensitivityReweights: a video pod prefers the node whose video engines
// are idle even though its GPUs are busier.
func TestSensitivityReweights(t *testing.T) {
	snap := &telemetry.Snapshot{Time: sampledAt, Nodes: map[string]*telemetry.Node{
		"a": {GPUs: []telemetry.GPU{gpuSample(0, "GPU-a0", telemetry.GPUUtil, 20.0, telemetry.EncUtil, 90.0),
			gpuSample(1, "GPU-a1", telemetry.GPUUtil, 20.0, telemetry.EncUtil, 90.0)}},
		"b": {GPUs: []telemetry.GPU{gpuSample(0, "GPU-b0", telemetry.GPUUtil, 50.0, telemetry.EncUtil, 0.0),
			gpuSample(1, "GPU-b1", telemetry.GPUUtil, 50.0, telemetry.EncUtil, 0.0)}},
	}}
	tests := []struct {
		annotation string
		want       string
	}{
		// a: (3×0.8 + 1×0.1 + 4×0.5)/8 = 0.5625; b: (3×0.5 + 1×1 + 4×0.5)/8 = 0.5625: a tie, first node.
		{"", "a"},
		// video weight 1×4 = 4 (sum 11): a (3×0.8 + 4×0.1 + 4×0.5)/11 = 0.436; b (3×0.5 + 4×1 + 4×0.5)/11 = 0.682.
		{"video", "b"},
		// utilization 3×4 = 12 (sum 17): a (12×0.8 + 0.1 + 4×0.5)/17 = 0.688; b (12×0.5 + 1 + 4×0.5)/17 = 0.529.
		{"compute-bound", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.annotation, func(t *testing.T) {
			c := newCluster(t, &fixedSource{snap}, sampledAt, twoGPUNode("a"), twoGPUNode("b"))
			pod := gt.MakeGPUPod("p").GPUs(1).Annotation(telemetry.AnnotationSensitiveTo, tt.annotation).Obj()
			if r := c.schedule(t, pod); r.node != tt.want {
				t.Errorf("pod on %q (scores %v), want %s", r.node, r.scores, tt.want)
			}
		})
	}
}

// TestUnhealthyGPUs: pods get healthy GPUs only, on a node with enough of
// them; a node with too few is filtered with the reason; stale telemetry
// filters nothing.
func TestUnhealthyGPUs(t *testing.T) {
	snap := &telemetry.Snapshot{Time: sampledAt, HealthWindow: 10 * time.Minute, Nodes: map[string]*telemetry.Node{
		"a": {GPUs: []telemetry.GPU{gpuSample(0, "GPU-a0", telemetry.XIDErrors, 79.0), gpuSample(1, "GPU-a1", telemetry.XIDErrors, 0.0)}},
	}}
	t.Run("fresh", func(t *testing.T) {
		c := newCluster(t, &fixedSource{snap}, sampledAt, twoGPUNode("a"))
		// BestFit alone would take GPU 0.
		if r := c.schedule(t, gt.MakeGPUPod("p1").GPUs(1).Obj()); r.node != "a" || !slices.Equal(r.devices, []int{1}) {
			t.Errorf("p1 on %q GPUs %v (status %v, filtered %v), want a GPU 1", r.node, r.devices, r.status, r.filtered)
		}
		r := c.schedule(t, gt.MakeGPUPod("p2").GPUs(1).Obj())
		if want := "unhealthy GPUs excluded (GPU 0: XID 79 within 10m0s)"; r.filtered["a"] != want {
			t.Errorf("p2: filtered %v, want a: %q", r.filtered, want)
		}
	})
	t.Run("too few healthy GPUs", func(t *testing.T) {
		c := newCluster(t, &fixedSource{snap}, sampledAt, twoGPUNode("a"))
		r := c.schedule(t, gt.MakeGPUPod("p").GPUs(2).Obj())
		// GPUTelemetry filters before GPUPlacement in this profile.
		if want := "too few healthy GPUs (GPU 0: XID 79 within 10m0s)"; r.filtered["a"] != want {
			t.Errorf("filtered %v, want a: %q", r.filtered, want)
		}
	})
	t.Run("GPUTelemetry's own filter", func(t *testing.T) {
		c := newClusterWith(t, false, nil, &fixedSource{snap}, sampledAt, twoGPUNode("a"), twoGPUNode("b"))
		r := c.schedule(t, gt.MakeGPUPod("p").GPUs(2).Obj())
		if want := "too few healthy GPUs (GPU 0: XID 79 within 10m0s)"; r.filtered["a"] != want || r.node != "b" {
			t.Errorf("on %q, filtered %v, want b, and a filtered: %q", r.node, r.filtered, want)
		}
	})
	t.Run("health filter off", func(t *testing.T) {
		args := defaultArgs(t)
		args.Health.Enabled = false
		c := newClusterWith(t, true, args, &fixedSource{snap}, sampledAt, twoGPUNode("a"))
		if r := c.schedule(t, gt.MakeGPUPod("p1").GPUs(2).Obj()); r.node != "a" || !slices.Equal(r.devices, []int{0, 1}) {
			t.Errorf("p1 on %q GPUs %v (filtered %v), want a GPUs 0,1: the filter is off", r.node, r.devices, r.filtered)
		}
	})
	t.Run("stale", func(t *testing.T) {
		c := newCluster(t, &fixedSource{snap}, sampledAt.Add(time.Hour), twoGPUNode("a"))
		if r := c.schedule(t, gt.MakeGPUPod("p1").GPUs(2).Obj()); r.node != "a" || !slices.Equal(r.devices, []int{0, 1}) {
			t.Errorf("p1 on %q GPUs %v (filtered %v), want a GPUs 0,1: unknown health is not bad health", r.node, r.devices, r.filtered)
		}
	})
}

// bestFitArgs are GPUPlacement's default args with the BestFit policy, which
// the tests' expectations are worked out for.
func bestFitArgs() *config.GPUPlacementArgs {
	var external configv1.GPUPlacementArgs
	configv1.SetDefaults_GPUPlacementArgs(&external)
	external.ScoringStrategy.Type = string(gpu.PolicyBestFit)
	args := &config.GPUPlacementArgs{}
	configv1.Convert_v1_GPUPlacementArgs_To_config_GPUPlacementArgs(&external, args)
	return args
}

// defaultArgs are the internal args the v1 defaults give.
func defaultArgs(t *testing.T) *config.GPUTelemetryArgs {
	t.Helper()
	var external configv1.GPUTelemetryArgs
	configv1.SetDefaults_GPUTelemetryArgs(&external)
	args := &config.GPUTelemetryArgs{}
	configv1.Convert_v1_GPUTelemetryArgs_To_config_GPUTelemetryArgs(&external, args)
	return args
}

// TestSignPod: pods with the same GPU count and sensitivity sign alike, so
// opportunistic batching may reuse one's results for the other; others do not.
func TestSignPod(t *testing.T) {
	c := newCluster(t, &fixedSource{}, sampledAt, twoGPUNode("a"))
	pl, err := gputelemetry.NewWithSource(&fixedSource{}, time.Now)(context.Background(), nil, c.fw)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*gputelemetry.GPUTelemetry)
	sign := func(pod *v1.Pod) any {
		fragments, status := p.SignPod(context.Background(), pod)
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		return fragments[0].Value
	}
	base := sign(gt.MakeGPUPod("p").GPUs(1).Obj())
	if got := sign(gt.MakeGPUPod("q").GPUs(1).Obj()); got != base {
		t.Errorf("same demand: %v, want %v", got, base)
	}
	for name, pod := range map[string]*v1.Pod{
		"two GPUs": gt.MakeGPUPod("q").GPUs(2).Obj(),
		"video":    gt.MakeGPUPod("q").GPUs(1).Annotation(telemetry.AnnotationSensitiveTo, "video").Obj(),
	} {
		if got := sign(pod); got == base {
			t.Errorf("%s: signed like a plain one-GPU pod (%v)", name, got)
		}
	}
}

func TestNewRequiresAddress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	args := &config.GPUTelemetryArgs{}
	_, err := gputelemetry.New(ctx, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "args.prometheus.address is empty") {
		t.Errorf("New without address: %v", err)
	}
	if _, err := gputelemetry.New(ctx, args, nil); err == nil || !strings.Contains(err.Error(), "invalid GPUTelemetryArgs") {
		t.Errorf("New with zero args: %v, want the validation errors", err)
	}
}
