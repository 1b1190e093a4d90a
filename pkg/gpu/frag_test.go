package gpu_test

import (
	"math"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestTypicalPods(t *testing.T) {
	whole := gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 8000}
	half := gpu.Demand{Count: 1, Milli: 500, MilliCPU: 4000}
	cpuOnly := gpu.Demand{MilliCPU: 2000}
	rare := gpu.Demand{Count: 8, Milli: 1000, MilliCPU: 64000}
	var demands []gpu.Demand
	for range 60 {
		demands = append(demands, whole)
	}
	for range 30 {
		demands = append(demands, half)
	}
	for range 6 {
		demands = append(demands, cpuOnly)
	}
	for range 4 {
		demands = append(demands, rare)
	}
	// 60 + 30 = 90 < 95, + 6 = 96 ≥ 95: the 8-GPU shape (4%) is left out, and
	// the rest are weighed over the 96 pods they cover.
	got := gpu.TypicalPods(demands)
	want := []struct {
		d gpu.Demand
		w float64
	}{{whole, 60.0 / 96}, {half, 30.0 / 96}, {cpuOnly, 6.0 / 96}}
	if len(got) != len(want) {
		t.Fatalf("got %d typical pods %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Demand.Count != w.d.Count || got[i].Demand.Milli != w.d.Milli || math.Abs(got[i].Weight-w.w) > 1e-9 {
			t.Errorf("typical pod %d = %+v, want %+v weight %.4f", i, got[i], w.d, w.w)
		}
	}
}

func TestFragment(t *testing.T) {
	// Typical pods: a whole GPU (weight ½), a 500 milli-GPU share (¼) and a
	// CPU-only pod (¼), each needing 4 CPUs.
	typical := []gpu.TypicalPod{
		{Demand: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 4000}, Weight: 0.5},
		{Demand: gpu.Demand{Count: 1, Milli: 500, MilliCPU: 4000}, Weight: 0.25},
		{Demand: gpu.Demand{MilliCPU: 4000}, Weight: 0.25},
	}
	four := gt.MakeGPUNode("n").GFD("T4", 4, 0)
	tests := []struct {
		name    string
		node    *gpu.NodeGPUs
		freeCPU int64
		want    float64
	}{
		{name: "idle node", node: nodeWithPods(t, four), freeCPU: 32000,
			// whole fits, nothing too small: 0; share: 0; CPU-only uses no GPU: all 4000.
			want: 0.25 * 4000},
		{name: "partly used GPUs", node: nodeWithPods(t, four,
			gpu.Assignment{Devices: []int{0}, Milli: 700}, gpu.Assignment{Devices: []int{1}, Milli: 400}), freeCPU: 32000,
			// free: 300, 600, 1000, 1000 = 2900. whole: GPUs 0 and 1 too small = 900;
			// share: GPU 0 (300) too small = 300; CPU-only: 2900.
			want: 0.5*900 + 0.25*300 + 0.25*2900},
		{name: "short of CPU", node: nodeWithPods(t, four,
			gpu.Assignment{Devices: []int{0}, Milli: 700}), freeCPU: 2000,
			// free 3300; no typical pod fits in 2 CPUs: all of it, whatever the weights.
			want: 3300},
		{name: "full node", node: nodeWithPods(t, four,
			gpu.Assignment{Devices: []int{0, 1, 2, 3}, Milli: 1000}), freeCPU: 32000, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.node.Fragment(tt.freeCPU, typical); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("fragment = %v, want %v", got, tt.want)
			}
		})
	}
	// A typical pod that may not run on the node's model cannot use any of it.
	a100Only := []gpu.TypicalPod{{Demand: gpu.Demand{Count: 1, Milli: 500, Models: []string{"A100"}}, Weight: 1}}
	if got := nodeWithPods(t, four).Fragment(32000, a100Only); got != 4000 {
		t.Errorf("fragment for a pod of another model = %v, want 4000 (all free milli-GPU)", got)
	}
}

// TestWorkloadDemand: which pods of a live cluster count for the typical
// pods, and with what shape; the simulator's ShapeOf counts every pod of
// its trace, a departing one too.
func TestWorkloadDemand(t *testing.T) {
	deleting := func(p *v1.Pod) *v1.Pod {
		now := metav1.Now()
		p.DeletionTimestamp = &now
		return p
	}
	tests := []struct {
		name     string
		pod      *v1.Pod
		workload bool // WorkloadDemand's ok
		shape    bool // ShapeOf's ok
		cpu      int64
		gpus     int
	}{
		{"a pending GPU pod", gt.MakeGPUPod("p").GPUs(2).CPU("4").Obj(), true, true, 4000, 2},
		{"a CPU-only pod counts, with its CPU", gt.MakeGPUPod("p").CPU("16").Obj(), true, true, 16000, 0},
		{"a bound pod", gt.MakeGPUPod("p").GPUs(1).CPU("2").Node("n").Obj(), true, true, 2000, 1},
		{"a bound pod being deleted still holds its node", deleting(gt.MakeGPUPod("p").GPUs(1).CPU("2").Node("n").Obj()), true, true, 2000, 1},
		{"a pending pod being deleted never runs; a trace's departing pod is still a shape", deleting(gt.MakeGPUPod("p").GPUs(1).CPU("2").Obj()), false, true, 2000, 1},
		{"a succeeded pod", gt.MakeGPUPod("p").GPUs(1).CPU("2").Node("n").Phase(v1.PodSucceeded).Obj(), false, true, 2000, 1},
		{"a failed pod", gt.MakeGPUPod("p").GPUs(1).CPU("2").Node("n").Phase(v1.PodFailed).Obj(), false, true, 2000, 1},
		{"a malformed demand", gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "half").Obj(), false, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := gpu.WorkloadDemand(tt.pod)
			if ok != tt.workload || (ok && (d.MilliCPU != tt.cpu || d.Count != tt.gpus)) {
				t.Errorf("WorkloadDemand = %d milli-CPU, %d GPUs, %t; want %d, %d, %t", d.MilliCPU, d.Count, ok, tt.cpu, tt.gpus, tt.workload)
			}
			s, ok := gpu.ShapeOf(tt.pod)
			if ok != tt.shape || (ok && (s.MilliCPU != tt.cpu || s.Count != tt.gpus)) {
				t.Errorf("ShapeOf = %d milli-CPU, %d GPUs, %t; want %d, %d, %t", s.MilliCPU, s.Count, ok, tt.cpu, tt.gpus, tt.shape)
			}
		})
	}
}
