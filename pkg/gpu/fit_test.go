package gpu_test

import (
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// nodeWithPods returns the ledger's view of node with the given assignments
// held by pods bound to it.
func nodeWithPods(t testing.TB, node *gt.NodeWrapper, assignments ...gpu.Assignment) *gpu.NodeGPUs {
	t.Helper()
	obj := node.Obj()
	var pods []*v1.Pod
	for i, a := range assignments {
		a.Node = obj.Name
		pods = append(pods, gt.MakeGPUPod("bound-"+strconv.Itoa(i)).Node(obj.Name).Assigned(a).Obj())
	}
	return gpu.NewLedger().Node(obj, 1, slices.Values(pods))
}

func TestCheck(t *testing.T) {
	const a100, t4 = "A100", "T4"
	mixed := gt.MakeGPUNode("n").Devices(
		gpu.Device{Index: 0, Model: a100, MemoryMiB: 40960},
		gpu.Device{Index: 1, Model: a100, MemoryMiB: 81920},
		gpu.Device{Index: 2, Model: t4, MemoryMiB: 16384},
	)
	share := func(milli int64, mem int64) gpu.Demand { return gpu.Demand{Count: 1, Milli: milli, MemoryMiB: mem} }
	whole := func(n int) gpu.Demand { return gpu.Demand{Count: n, Milli: 1000} }
	tests := []struct {
		name        string
		node        *gpu.NodeGPUs
		demand      gpu.Demand
		wantFree    gpu.DeviceSet
		wantReasons []gpu.Reason
	}{
		{name: "no GPUs", node: nodeWithPods(t, gt.MakeGPUNode("n")), demand: whole(1), wantReasons: []gpu.Reason{gpu.ReasonNoGPUs}},
		{
			name:        "invalid inventory",
			node:        nodeWithPods(t, gt.MakeGPUNode("n").Annotation(gpu.AnnotationDevices, "{")),
			demand:      whole(1),
			wantReasons: []gpu.Reason{gpu.ReasonInventoryInvalid},
		},
		{name: "all three free", node: nodeWithPods(t, mixed), demand: whole(3), wantFree: 0b111},
		{name: "more GPUs than the node has", node: nodeWithPods(t, mixed), demand: whole(4), wantFree: 0b111, wantReasons: []gpu.Reason{gpu.ReasonTooFewGPUs}},
		{
			name:        "model rules out the T4; two A100s are not three",
			node:        nodeWithPods(t, mixed),
			demand:      gpu.Demand{Count: 3, Milli: 1000, Models: []string{a100}},
			wantFree:    0b011,
			wantReasons: []gpu.Reason{gpu.ReasonModelNotAllowed},
		},
		{
			name:        "model and memory each rule out a GPU: one reason per cause",
			node:        nodeWithPods(t, mixed),
			demand:      gpu.Demand{Count: 2, Milli: 1000, MemoryMiB: 65536, Models: []string{a100}},
			wantFree:    0b010,
			wantReasons: []gpu.Reason{gpu.ReasonModelNotAllowed, gpu.ReasonMemoryTooSmall},
		},
		{
			name:        "a busy GPU: freeing would help",
			node:        nodeWithPods(t, mixed, gpu.Assignment{Devices: []int{2}, Milli: 1}),
			demand:      whole(3),
			wantFree:    0b011,
			wantReasons: []gpu.Reason{gpu.ReasonInsufficientGPUs},
		},
		{
			name:     "a share fits beside another",
			node:     nodeWithPods(t, mixed, gpu.Assignment{Devices: []int{0}, Milli: 600, MemoryMiB: 30000}),
			demand:   share(400, 10000),
			wantFree: 0b111, // GPU 0: 400 milli and 10960 MiB free
		},
		{
			name: "no GPU has the share's milli",
			node: nodeWithPods(t, mixed,
				gpu.Assignment{Devices: []int{0, 1, 2}, Milli: 1000}),
			demand:      share(1, 0),
			wantReasons: []gpu.Reason{gpu.ReasonInsufficientShare},
		},
		{
			name: "milli is free but memory is not",
			node: nodeWithPods(t, mixed,
				gpu.Assignment{Devices: []int{0}, Milli: 100, MemoryMiB: 40000},
				gpu.Assignment{Devices: []int{1}, Milli: 100, MemoryMiB: 81000}, // 920 MiB left
				gpu.Assignment{Devices: []int{2}, Milli: 100, MemoryMiB: 16000}),
			demand:      share(100, 1024),
			wantReasons: []gpu.Reason{gpu.ReasonInsufficientMemory},
		},
		{
			name: "an unhealthy GPU is never a candidate, even for an unconstrained demand",
			node: nodeWithPods(t, gt.MakeGPUNode("n").Devices(
				gpu.Device{Index: 0, Model: a100},
				gpu.Device{Index: 1, Model: a100, Unhealthy: "XID 79"},
			)),
			demand:   whole(1),
			wantFree: 0b01,
		},
		{
			name: "two GPUs asked, one of two unhealthy: unresolvable",
			node: nodeWithPods(t, gt.MakeGPUNode("n").Devices(
				gpu.Device{Index: 0, Model: a100},
				gpu.Device{Index: 1, Model: a100, Unhealthy: "XID 79"},
			)),
			demand:      whole(2),
			wantFree:    0b01,
			wantReasons: []gpu.Reason{gpu.ReasonUnhealthy},
		},
		{
			name: "a share avoids the unhealthy GPU",
			node: nodeWithPods(t, gt.MakeGPUNode("n").Devices(
				gpu.Device{Index: 0, Model: a100, Unhealthy: "XID 48"},
				gpu.Device{Index: 1, Model: a100},
			)),
			demand:   share(500, 0),
			wantFree: 0b10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fit := gpu.Check(tt.node, &gpu.Request{Demand: &tt.demand})
			free, reasons := fit.Free, fit.Reasons
			if free != tt.wantFree {
				t.Errorf("free = %b, want %b", free, tt.wantFree)
			}
			var want gpu.Reasons
			for _, r := range tt.wantReasons {
				want |= gpu.Reasons(r)
			}
			if reasons != want {
				t.Errorf("reasons = %q, want %q", reasons.Strings(), want.Strings())
			}
		})
	}
}

func TestReasonsUnresolvable(t *testing.T) {
	if !gpu.Reasons(gpu.ReasonModelNotAllowed).Unresolvable() {
		t.Error("a model mismatch cannot be cured by preemption")
	}
	if gpu.Reasons(gpu.ReasonInsufficientGPUs).Unresolvable() {
		t.Error("busy GPUs can be freed")
	}
	if got := (gpu.Reasons(gpu.ReasonNoGPUs) | gpu.Reasons(gpu.ReasonInsufficientShare)).String(); got != "node has no GPUs, insufficient free GPU share" {
		t.Errorf("String() = %q", got)
	}
}

func TestNewAssignment(t *testing.T) {
	n := nodeWithPods(t, gt.MakeGPUNode("n").Devices(
		gpu.Device{Index: 4, UUID: "GPU-4", Model: "H100"},
		gpu.Device{Index: 7, UUID: "GPU-7", Model: "H100"},
	))
	d := gpu.Demand{Count: 1, Milli: 300, MemoryMiB: 2048}
	a := gpu.NewAssignment(n, &d, 0b10)
	if got, want := a.String(), "node=n;gpus=7;milli=300;memory=2048;uuids=GPU-7"; got != want {
		t.Errorf("assignment = %q, want %q", got, want)
	}
}
