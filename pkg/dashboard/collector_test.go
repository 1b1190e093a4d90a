package dashboard

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	t4   = "Tesla-T4"
)

// fixture is a small cluster whose numbers are worked out by hand below:
//
//   - a100-0 (pool "train"): 2 A100s of 81920 MiB. GPU 0 is held whole by
//     whole-1; GPU 1 has a 250m, 10240 MiB share (share-1).
//   - t4-0 (pool "serve"): 2 T4s of 16384 MiB from the devices annotation,
//     GPU 1 unhealthy; no pods.
//   - broken: a malformed devices annotation, so its GPUs cannot be read.
//   - pending, in queue order: big (2 GPUs, the scheduler says 2 nodes
//     lack free GPUs and 1 has too few), bad-milli (gpu-milli "lots", a
//     malformed request), fresh (1 GPU, no word from the scheduler yet).
//
// Typical pods: the valid demands of every pod (gpu.WorkloadDemand), the
// CPU-only one included: 1 GPU (whole-1, fresh), 250m (share-1), 2 GPUs
// (big), no GPU (no-gpu): weights 2/5, 1/5, 1/5, 1/5 (all four shapes are
// needed to cover 95%).
//
// Fragmentation of a100-0 (free: GPU 0 0m, GPU 1 750m; 750m in all):
// 1 GPU and 2 GPUs fit no GPU (none has 1000m free), so they could use none
// of the 750m; 250m fits GPU 1 and wastes GPU 0's 0m; a pod without GPUs
// uses no free GPU at all:
// 0.4×750 + 0.2×750 + 0.2×0 + 0.2×750 = 600.
// t4-0 (2000m free, both GPUs whole): every GPU shape fits, and only the pod
// without GPUs leaves the 2000m unused: 0.2×2000 = 400.
func fixture() (nodes []*v1.Node, pods []*v1.Pod) {
	nodes = []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Label("cloud.google.com/gke-nodepool", "train").Obj(),
		gt.MakeGPUNode("t4-0").Label("cloud.google.com/gke-nodepool", "serve").Devices(
			gpu.Device{Index: 0, Model: t4, MemoryMiB: 16384},
			gpu.Device{Index: 1, Model: t4, MemoryMiB: 16384, Unhealthy: "XID 79"}).Obj(),
		gt.MakeGPUNode("broken").Annotation(gpu.AnnotationDevices, "{not json").AllocatableGPUs(1).Obj(),
		gt.MakeGPUNode("cpu-only").Obj(),
	}
	unschedulable := func(p *v1.Pod, msg string) *v1.Pod {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: "Unschedulable", Message: msg}}
		return p
	}
	pods = []*v1.Pod{
		gt.MakeGPUPod("whole-1").GPUs(1).Node("a100-0").Assigned(gpu.Assignment{Node: "a100-0", Devices: []int{0}, Milli: 1000}).Obj(),
		gt.MakeGPUPod("share-1").Milli(250).GPUMemory("10240").Node("a100-0").
			Assigned(gpu.Assignment{Node: "a100-0", Devices: []int{1}, Milli: 250, MemoryMiB: 10240}).Obj(),
		unschedulable(gt.MakeGPUPod("big").GPUs(2).Priority(10).Obj(),
			"0/4 nodes are available: 1 too few GPUs on node, 2 insufficient free GPUs. preemption: 0/4 nodes are available: 3 Preemption is not helpful for scheduling."),
		gt.MakeGPUPod("bad-milli").Annotation(gpu.AnnotationMilli, "lots").Priority(5).Obj(),
		gt.MakeGPUPod("fresh").GPUs(1).Obj(),
		gt.MakeGPUPod("no-gpu").Obj(),
	}
	return nodes, pods
}

func fixtureState(t *testing.T) *State {
	t.Helper()
	nodes, pods := fixture()
	s := NewState(10, time.Second, 0)
	s.Publish(gpuview.Build(nodes, pods, gpuview.Options{}), time.Now())
	return s
}

// gather collects c and returns each series as `name{l1="v1",...}` -> value,
// labels sorted by name.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			out[seriesKey(f.GetName(), m.GetLabel())] = m.GetGauge().GetValue()
		}
	}
	return out
}

func seriesKey(name string, labels []*dto.LabelPair) string {
	var parts []string
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

func TestDashboardCollector(t *testing.T) {
	got := gather(t, NewCollector(fixtureState(t), true))
	want := map[string]float64{
		// a100-0: GPU 0 whole (1000m, all 81920 MiB), GPU 1 a 250m share reserving 10240 MiB.
		`gpusched_gpu_allocated_milli{gpu="0",model="NVIDIA-A100-SXM4-80GB",node="a100-0"}`:      1000,
		`gpusched_gpu_allocated_milli{gpu="1",model="NVIDIA-A100-SXM4-80GB",node="a100-0"}`:      250,
		`gpusched_gpu_allocated_memory_mib{gpu="0",model="NVIDIA-A100-SXM4-80GB",node="a100-0"}`: 81920,
		`gpusched_gpu_allocated_memory_mib{gpu="1",model="NVIDIA-A100-SXM4-80GB",node="a100-0"}`: 10240,
		`gpusched_gpu_capacity_memory_mib{gpu="1",model="NVIDIA-A100-SXM4-80GB",node="a100-0"}`:  81920,
		`gpusched_gpu_unhealthy{gpu="1",model="Tesla-T4",node="t4-0"}`:                           1,
		`gpusched_gpu_unhealthy{gpu="0",model="Tesla-T4",node="t4-0"}`:                           0,
		`gpusched_gpu_allocated_milli{gpu="1",model="Tesla-T4",node="t4-0"}`:                     0,
		// a100-0: 2 GPUs × 1000m = 2000m; 1000 + 250 = 1250m held; 600m fragmented (fixture).
		`gpusched_node_gpu_capacity_milli{model="NVIDIA-A100-SXM4-80GB",node="a100-0",pool="train"}`:  2000,
		`gpusched_node_gpu_allocated_milli{model="NVIDIA-A100-SXM4-80GB",node="a100-0",pool="train"}`: 1250,
		`gpusched_node_fragmented_milli{model="NVIDIA-A100-SXM4-80GB",node="a100-0",pool="train"}`:    600,
		`gpusched_node_fragmented_milli{model="Tesla-T4",node="t4-0",pool="serve"}`:                   400,
		`gpusched_node_gpu_inventory_invalid{node="broken",pool=""}`:                                  1,
		`gpusched_node_gpu_inventory_invalid{node="t4-0",pool="serve"}`:                               0,
		`gpusched_node_gpu_assignment_conflicts{node="a100-0",pool="train"}`:                          0,
		// Cluster: 2000 + 2000 (t4-0) = 4000m; 1250m held; 600 + 400 = 1000m fragmented; 4 GPUs.
		`gpusched_cluster_gpu_capacity_milli{}`:  4000,
		`gpusched_cluster_gpu_allocated_milli{}`: 1250,
		`gpusched_cluster_fragmented_milli{}`:    1000,
		`gpusched_cluster_gpus{}`:                4,
		// big: 2 nodes insufficient free GPUs beat 1 too few; bad-milli: invalid; fresh: waiting.
		`gpusched_pending_gpu_pods{reason="insufficient-free-gpus"}`: 1,
		`gpusched_pending_gpu_pods{reason="too-few-gpus-on-node"}`:   0,
		`gpusched_pending_gpu_pods{reason="invalid-request"}`:        1,
		`gpusched_pending_gpu_pods{reason="waiting"}`:                1,
		`gpusched_pending_gpu_pods{reason="gang"}`:                   0,
		`gpusched_pending_gpu_pods{reason="other"}`:                  0,
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing series %s", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	// Every reason class has its series, and nothing else names a reason.
	var reasons []string
	for k := range got {
		if strings.HasPrefix(k, "gpusched_pending_gpu_pods{") {
			reasons = append(reasons, k)
		}
	}
	if len(reasons) != len(ReasonClasses()) {
		t.Errorf("%d pending series, want one per class (%d): %v", len(reasons), len(ReasonClasses()), reasons)
	}
	// The broken node has no capacity series; cpu-only has no series at all.
	for k := range got {
		if strings.Contains(k, `node="cpu-only"`) || (strings.Contains(k, `node="broken"`) && !strings.HasPrefix(k, "gpusched_node_gpu_inventory_invalid")) {
			t.Errorf("unexpected series %s", k)
		}
	}
	if age, ok := got["gpusched_dashboard_snapshot_age_seconds{}"]; !ok || age < 0 || age > 60 {
		t.Errorf("snapshot age %v (present %v), want a few seconds at most", age, ok)
	}
}

// TestDashboardCollectorWithoutPerGPU: --per-gpu-metrics=false drops every
// gpusched_gpu_* series and keeps the per-node and cluster ones.
func TestDashboardCollectorWithoutPerGPU(t *testing.T) {
	got := gather(t, NewCollector(fixtureState(t), false))
	for k := range got {
		if strings.HasPrefix(k, "gpusched_gpu_") {
			t.Errorf("per-GPU series %s exported with per-GPU metrics off", k)
		}
	}
	if got[`gpusched_node_gpu_allocated_milli{model="NVIDIA-A100-SXM4-80GB",node="a100-0",pool="train"}`] != 1250 {
		t.Errorf("per-node series missing or wrong: %v", got)
	}
	if n := len(metricNames(NewCollector(nil, false))); n != len(metricNames(NewCollector(nil, true)))-4 {
		t.Errorf("Describe without per-GPU metrics lists %d names, want 4 fewer than with them", n)
	}
}

// TestDashboardCollectorBeforeFirstSnapshot: nothing to scrape yet, and no error.
func TestDashboardCollectorBeforeFirstSnapshot(t *testing.T) {
	if got := gather(t, NewCollector(NewState(1, time.Second, 0), true)); len(got) != 0 {
		t.Errorf("series before any snapshot: %v", got)
	}
}

func TestDashboardReasonClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  gpuview.PendingPod
		want string
	}{
		{"malformed request wins", gpuview.PendingPod{DemandError: "x", Reason: "0/3 nodes are available: 3 insufficient free GPUs."}, ClassInvalidRequest},
		{"the reason on most nodes", gpuview.PendingPod{Reason: "0/5 nodes are available: 1 GPU model not allowed, 4 insufficient free GPU share."}, "insufficient-free-gpu-share"},
		{"ties go to the first class", gpuview.PendingPod{Reason: "0/4 nodes are available: 2 insufficient free GPU memory, 2 GPU model not allowed."}, "gpu-model-not-allowed"},
		{"preemption's part does not count", gpuview.PendingPod{Reason: "0/2 nodes are available: 2 node(s) had untolerated taint. preemption: 2 insufficient free GPUs."}, ClassOther},
		{"DRA", gpuview.PendingPod{Reason: "0/1 nodes are available: 1 node GPUs allocated by DRA."}, "node-gpus-allocated-by-dra"},
		{"gang member", gpuview.PendingPod{Gang: "train", Reason: "pod group is not ready"}, ClassGang},
		{"gang member short of GPUs", gpuview.PendingPod{Gang: "train", Reason: "0/1 nodes are available: 1 insufficient free GPUs."}, "insufficient-free-gpus"},
		{"no word yet", gpuview.PendingPod{}, ClassWaiting},
		{"anything else", gpuview.PendingPod{Reason: "0/3 nodes are available: 3 Insufficient cpu."}, ClassOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReasonClass(&tc.pod)
			if got != tc.want {
				t.Errorf("ReasonClass = %q, want %q", got, tc.want)
			}
			if !slices.Contains(ReasonClasses(), got) {
				t.Errorf("%q is not among ReasonClasses %v", got, ReasonClasses())
			}
		})
	}
	// One class per engine reason, plus the four others, all distinct.
	classes := ReasonClasses()
	if len(slices.Compact(slices.Sorted(slices.Values(classes)))) != len(classes) || len(classes) != 10+4 {
		t.Errorf("ReasonClasses = %v, want 14 distinct classes", classes)
	}
}

// metricNames are the metric names c's Describe lists.
func metricNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	var names []string
	for d := range ch {
		s := d.String()
		const key = `fqName: "`
		i := strings.Index(s, key)
		if i < 0 {
			continue
		}
		rest := s[i+len(key):]
		names = append(names, rest[:strings.IndexByte(rest, '"')])
	}
	return names
}
