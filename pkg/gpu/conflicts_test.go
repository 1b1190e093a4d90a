package gpu_test

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestLedgerResolvesByUUIDAndReportsConflicts: an assignment that carries
// UUIDs counts on the GPU with that UUID wherever the node now numbers it,
// and not at all when the GPU is gone; each is a conflict, reported once
// per change of the node's conflicts, and once more when they are gone.
func TestLedgerResolvesByUUIDAndReportsConflicts(t *testing.T) {
	a100 := func(index int, uuid string) gpu.Device {
		return gpu.Device{Index: index, UUID: uuid, Model: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920}
	}
	// The pod was given GPU-b as index 1.
	pod := gt.MakeGPUPod("p").Node("n").Assigned(gpu.Assignment{Node: "n", Devices: []int{1}, UUIDs: []string{"GPU-b"}, Milli: 1000}).Obj()
	var reports [][]string
	l := gpu.NewLedger()
	l.ReportConflicts(func(node string, conflicts []string) {
		if node != "n" {
			t.Errorf("report for node %q", node)
		}
		reports = append(reports, slices.Clone(conflicts))
	})
	for gen, step := range []struct {
		name        string
		devices     []gpu.Device
		pods        []*v1.Pod
		wantUsed    map[string]int64 // milli by UUID
		wantReports int              // reports so far
		wantReport  string           // part of the last report; "" for an empty one
	}{
		{"as assigned: no conflict", []gpu.Device{a100(0, "GPU-a"), a100(1, "GPU-b")}, []*v1.Pod{pod},
			map[string]int64{"GPU-a": 0, "GPU-b": 1000}, 0, ""},
		// GPU-a fell off the bus: GPU-b is now index 0.
		{"renumbered: counted by UUID", []gpu.Device{a100(0, "GPU-b")}, []*v1.Pod{pod},
			map[string]int64{"GPU-b": 1000}, 1, "GPU GPU-b is assigned as index 1 but is index 0 on node n now"},
		{"the same conflict again: not reported", []gpu.Device{a100(0, "GPU-b")}, []*v1.Pod{pod},
			map[string]int64{"GPU-b": 1000}, 1, "GPU GPU-b is assigned as index 1"},
		// GPU-b is gone; index 1 is another GPU, which must not count it.
		{"gone: counted nowhere", []gpu.Device{a100(0, "GPU-a"), a100(1, "GPU-c")}, []*v1.Pod{pod},
			map[string]int64{"GPU-a": 0, "GPU-c": 0}, 2, "GPU GPU-b (assigned as index 1) is not on node n any more"},
		{"the pod ends: conflicts gone", []gpu.Device{a100(0, "GPU-a"), a100(1, "GPU-c")}, nil,
			map[string]int64{"GPU-a": 0, "GPU-c": 0}, 3, ""},
	} {
		node := gt.MakeGPUNode("n").Devices(step.devices...).Obj()
		view := l.Node(node, int64(gen+1), slices.Values(step.pods))
		for i, dev := range view.Inventory.Devices {
			if want, ok := step.wantUsed[dev.UUID]; !ok || view.Used[i].Milli != want {
				t.Errorf("%s: %s has %dm, want %dm", step.name, dev.UUID, view.Used[i].Milli, want)
			}
		}
		if len(reports) != step.wantReports {
			t.Fatalf("%s: %d reports %q, want %d", step.name, len(reports), reports, step.wantReports)
		}
		if step.wantReports == 0 {
			continue
		}
		last := strings.Join(reports[len(reports)-1], "; ")
		if (step.wantReport == "") != (last == "") || !strings.Contains(last, step.wantReport) {
			t.Errorf("%s: last report %q, want one with %q", step.name, last, step.wantReport)
		}
	}
}
