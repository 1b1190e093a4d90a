package gpu_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// withMemory sets the pod's memory request.
func withMemory(w *gt.PodWrapper, q string) *v1.Pod {
	p := w.Obj()
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse(q)
	return p
}

// TestFreeOn: a node's free CPU and memory are its allocatable less the
// requests of the pods that hold it, the memory rounded down to MiB only
// once, on the total, as the scheduler's NodeInfo sums it.
func TestFreeOn(t *testing.T) {
	node := gt.MakeGPUNode("n").CPU("8").Obj() // 8000m, 512Gi = 524288 MiB
	tests := []struct {
		name    string
		pods    []*v1.Pod
		wantCPU int64 // milli-CPU
		wantMiB int64
	}{
		{"no pods: the allocatable", nil, 8000, 524288},
		// 8000 - 1500 - 500 = 6000m; 524288 - 1024 - 512 = 522752 MiB.
		{"two pods", []*v1.Pod{
			withMemory(gt.MakeGPUPod("a").CPU("1500m"), "1Gi"),
			withMemory(gt.MakeGPUPod("b").CPU("500m"), "512Mi")}, 6000, 522752},
		// Two pods of 1500Ki (1.46 MiB) take 3000Ki, 2.93 MiB: 524288 MiB
		// less that is 524285.07, rounded down 524285. Rounding each pod
		// down first would leave 524286.
		{"parts of a MiB add up before rounding", []*v1.Pod{
			withMemory(gt.MakeGPUPod("a"), "1500Ki"),
			withMemory(gt.MakeGPUPod("b"), "1500Ki")}, 8000, 524285},
		// The failed pod holds nothing: 8000 - 2000 = 6000m.
		{"a terminated pod holds nothing", []*v1.Pod{
			gt.MakeGPUPod("run").CPU("2").Obj(),
			gt.MakeGPUPod("done").CPU("4").Phase(v1.PodFailed).Obj()}, 6000, 524288},
		// 8000 - 10000 = -2000m: an overcommitted node shows it.
		{"overcommitted", []*v1.Pod{gt.MakeGPUPod("big").CPU("10").Obj()}, -2000, 524288},
	}
	for _, tt := range tests {
		f := gpu.FreeOn(node, tt.pods)
		if f.MilliCPU != tt.wantCPU || f.MemoryMiB() != tt.wantMiB {
			t.Errorf("%s: free %dm, %d MiB; want %dm, %d MiB", tt.name, f.MilliCPU, f.MemoryMiB(), tt.wantCPU, tt.wantMiB)
		}
		// Give undoes Take.
		g := f
		for _, p := range tt.pods {
			if gpu.HoldsNode(p) {
				g.Give(p)
			}
		}
		if g != gpu.AllocatableOf(node) {
			t.Errorf("%s: giving every pod back leaves %+v; want the allocatable %+v", tt.name, g, gpu.AllocatableOf(node))
		}
	}
}

// TestMaxima: the largest allocatable CPU and the most GPUs of any node,
// a node without GPUs or with an unreadable inventory counting its CPU.
func TestMaxima(t *testing.T) {
	broken := gt.MakeGPUNode("broken").CPU("256").GFD("NVIDIA-A100-SXM4-80GB", 8, 81920).
		Annotation(gpu.AnnotationDevices, "not JSON").Obj()
	var m gpu.Maxima
	for _, n := range []*v1.Node{
		gt.MakeGPUNode("a").CPU("32").GFD("NVIDIA-A100-SXM4-80GB", 4, 81920).Obj(),
		gt.MakeGPUNode("cpu-only").CPU("128").Obj(),
		broken,
	} {
		m.IncludeNode(n)
	}
	// CPU: the broken node's 256 CPUs; GPUs: node a's 4, since the broken
	// node's inventory cannot be read.
	if m.MilliCPU != 256000 || m.GPUs != 4 {
		t.Errorf("maxima %dm, %d GPUs; want 256000m, 4 GPUs", m.MilliCPU, m.GPUs)
	}
	m.Include(0, 16) // a DRA node's 16 published GPUs
	h := m.Host(gpu.Free{MilliCPU: 1000, MemoryBytes: 3<<20 - 1})
	// 3 MiB less a byte is 2 whole MiB.
	want := gpu.Host{Known: true, FreeMilliCPU: 1000, FreeMemoryMiB: 2, MaxMilliCPU: 256000, MaxGPUs: 16}
	if h != want {
		t.Errorf("Host = %+v; want %+v", h, want)
	}
}
