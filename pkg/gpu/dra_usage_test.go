package gpu_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// fourH100 is a node of four 81920 MiB GPUs (gpu-0..3), with two MIG
// devices of gpu-2 and shared allocation on gpu-3.
func fourH100(t *testing.T) *gpu.DRAInventory {
	t.Helper()
	s := gt.MakeNVIDIASlice("s0", "node-a").
		GPU(0, "GPU-0", h100DRA, 81920, "").GPU(1, "GPU-1", h100DRA, 81920, "").
		GPU(2, "GPU-2", h100DRA, 81920, "").MIG(2, "GPU-2", "1g.10gb", 0, 10240).MIG(2, "GPU-2", "3g.40gb", 4, 40960).Obj()
	shared := gt.MakeNVIDIASlice("s1", "node-a").Pool("node-a", 1, 2).GPU(3, "GPU-3", h100DRA, 81920, "").Shared().Obj()
	s.Spec.Pool.ResourceSliceCount = 2
	d, problems := gpu.InventoryFromSlices("node-a", []*resourceapi.ResourceSlice{s, shared}, nvidia)
	if len(problems) > 0 || d.Inventory.Len() != 4 {
		t.Fatalf("inventory %+v, problems %v", d, problems)
	}
	return d
}

// TestDRAUsage: DRA allocations become usage on the node's view.
//
// A whole device takes 1000 milli-GPU; a partition or a share takes its
// memory's part of the GPU, ceil(1000 × memory / 81920).
func TestDRAUsage(t *testing.T) {
	d := fourH100(t)
	tests := []struct {
		name  string
		alloc gpu.DRAAllocated
		want  []gpu.Usage
	}{{
		name: "nothing allocated",
		want: []gpu.Usage{{}, {}, {}, {}},
	}, {
		name:  "whole GPUs; devices of other nodes and drivers are ignored",
		alloc: gpu.DRAAllocated{Exclusive: map[gpu.DRADeviceID]bool{id("node-a", "gpu-1"): true, id("node-b", "gpu-0"): true, {Driver: "other", Pool: "node-a", Device: "gpu-0"}: true}},
		want:  []gpu.Usage{{}, {Milli: 1000}, {}, {}},
	}, {
		name: "MIG devices take their part of the parent",
		alloc: gpu.DRAAllocated{Exclusive: map[gpu.DRADeviceID]bool{
			id("node-a", "gpu-2-mig-1g.10gb-0"): true, // ceil(1000 × 10240 / 81920) = 125
			id("node-a", "gpu-2-mig-3g.40gb-4"): true, // ceil(1000 × 40960 / 81920) = 500
		}},
		want: []gpu.Usage{{}, {}, {Milli: 625, MemoryMiB: 51200}, {}},
	}, {
		name:  "consumable memory: a share",
		alloc: gpu.DRAAllocated{SharedMemoryMiB: map[gpu.DRADeviceID]int64{id("node-a", "gpu-3"): 20000}}, // ceil(1000 × 20000 / 81920) = 245
		want:  []gpu.Usage{{}, {}, {}, {Milli: 245, MemoryMiB: 20000}},
	}, {
		name:  "shares that consume no memory still make the GPU busy",
		alloc: gpu.DRAAllocated{SharedMemoryMiB: map[gpu.DRADeviceID]int64{id("node-a", "gpu-3"): 0}},
		want:  []gpu.Usage{{}, {}, {}, {Milli: 1}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			empty := gpu.EmptyDRANodeGPUs("node-a", d)
			n := empty.WithDRA(d, &tt.alloc)
			for i, want := range tt.want {
				if n.Used[i] != want {
					t.Errorf("GPU %d: got %+v, want %+v", i, n.Used[i], want)
				}
			}
			for i := range empty.Used {
				if empty.Used[i] != (gpu.Usage{}) {
					t.Fatalf("WithDRA changed its receiver: GPU %d %+v", i, empty.Used[i])
				}
			}
		})
	}
}

// TestDRAUsageOtherInventory: a view of another inventory is left alone.
func TestDRAUsageOtherInventory(t *testing.T) {
	d := fourH100(t)
	other := gpu.EmptyNodeGPUs(gt.MakeGPUNode("node-a").GFD("NVIDIA-H100-80GB-HBM3", 4, 81920).Obj())
	if got := other.WithDRA(d, &gpu.DRAAllocated{Exclusive: map[gpu.DRADeviceID]bool{id("node-a", "gpu-0"): true}}); got != other {
		t.Errorf("got a new view of another inventory")
	}
}

// TestDRAPredictFirstFit: DRA takes the lowest free positions.
func TestDRAPredictFirstFit(t *testing.T) {
	d := fourH100(t)
	n := gpu.EmptyDRANodeGPUs("node-a", d).WithDRA(d, &gpu.DRAAllocated{Exclusive: map[gpu.DRADeviceID]bool{id("node-a", "gpu-0"): true, id("node-a", "gpu-2"): true}})
	for _, tt := range []struct {
		count int
		want  gpu.DeviceSet
		ok    bool
	}{
		{count: 1, want: 1 << 1, ok: true},
		{count: 2, want: 1<<1 | 1<<3, ok: true},
		{count: 3, ok: false},
	} {
		chosen, fit := gpu.PredictFirstFit(n, &gpu.Demand{Count: tt.count, Milli: gpu.MilliPerGPU})
		if chosen != tt.want || fit.OK() != tt.ok {
			t.Errorf("%d GPUs: got %b (fit %v), want %b (fit %v)", tt.count, chosen, fit.Reasons, tt.want, tt.ok)
		}
	}
}

// TestDRADeferReasons: a model list or memory minimum can be left to DRA's
// choice only when every GPU of the node meets it.
func TestDRADeferReasons(t *testing.T) {
	s := gt.MakeNVIDIASlice("s0", "node-a").GPU(0, "GPU-0", h100DRA, 81920, "").GPU(1, "GPU-1", "NVIDIA A100-SXM4-40GB", 40960, "").Obj()
	d, _ := gpu.InventoryFromSlices("node-a", []*resourceapi.ResourceSlice{s}, nvidia)
	for _, tt := range []struct {
		demand gpu.Demand
		want   gpu.Reasons
	}{
		{demand: gpu.Demand{Count: 1, Milli: 1000}},
		{demand: gpu.Demand{Count: 1, Milli: 1000, MemoryMiB: 40960}},
		{demand: gpu.Demand{Count: 1, Milli: 1000, MemoryMiB: 81920}, want: gpu.Reasons(gpu.ReasonMemoryTooSmall)},
		{demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"NVIDIA-H100-80GB-HBM3"}}, want: gpu.Reasons(gpu.ReasonModelNotAllowed)},
		{demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"nvidia-h100-80gb-hbm3", "NVIDIA-A100-SXM4-40GB"}}},
	} {
		if got := gpu.DRADeferReasons(d.Inventory, &tt.demand); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.demand.String(), got, tt.want)
		}
	}
}

// TestDRAResourceClaimPlacementOf: a DRA allocation becomes the demand and
// GPUs a policy scores.
func TestDRAResourceClaimPlacementOf(t *testing.T) {
	d := fourH100(t)
	whole := func(dev string) gpu.DRAPicked { return gpu.DRAPicked{ID: id("node-a", dev)} }
	tests := []struct {
		name   string
		picked []gpu.DRAPicked
		want   gpu.Demand
		chosen gpu.DeviceSet
		ok     bool
	}{
		{name: "two whole GPUs", picked: []gpu.DRAPicked{whole("gpu-1"), whole("gpu-0")},
			want: gpu.Demand{Count: 2, Milli: 1000}, chosen: 0b11, ok: true},
		{name: "a MIG partition: ceil(1000 × 10240 / 81920) = 125 on its parent", picked: []gpu.DRAPicked{whole("gpu-2-mig-1g.10gb-0")},
			want: gpu.Demand{Count: 1, Milli: 125, MemoryMiB: 10240}, chosen: 0b100, ok: true},
		{name: "a share of consumable memory: ceil(1000 × 40960 / 81920) = 500", picked: []gpu.DRAPicked{{ID: id("node-a", "gpu-3"), Shared: true, MemoryMiB: 40960}},
			want: gpu.Demand{Count: 1, Milli: 500, MemoryMiB: 40960}, chosen: 0b1000, ok: true},
		{name: "two shares of all their memory are two whole GPUs", picked: []gpu.DRAPicked{{ID: id("node-a", "gpu-0"), Shared: true, MemoryMiB: 81920}, {ID: id("node-a", "gpu-2"), Shared: true, MemoryMiB: 81920}},
			want: gpu.Demand{Count: 2, Milli: 1000}, chosen: 0b101, ok: true},
		{name: "devices of another node", picked: []gpu.DRAPicked{whole("gpu-9"), {ID: id("node-b", "gpu-0")}}},
		{name: "a share and a whole GPU", picked: []gpu.DRAPicked{whole("gpu-0"), {ID: id("node-a", "gpu-3"), Shared: true, MemoryMiB: 1024}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			demand, chosen, ok := d.PlacementOf(tt.picked)
			if ok != tt.ok || chosen != tt.chosen || demand.Count != tt.want.Count || demand.Milli != tt.want.Milli || demand.MemoryMiB != tt.want.MemoryMiB {
				t.Errorf("got %+v %b %v, want %+v %b %v", demand, chosen, ok, tt.want, tt.chosen, tt.ok)
			}
		})
	}
}

// TestDRADemandOf: a DRA request as the engine places it, on fourH100
// (81920 MiB GPUs). A share is memory's part of the smallest eligible GPU,
// ceil(1000 × memory / 81920); the host part comes from base.
func TestDRADemandOf(t *testing.T) {
	d := fourH100(t)
	base := gpu.Demand{MilliCPU: 4000, HostMemoryMiB: 8192}
	all := gpu.DeviceSet(0b1111)
	tests := []struct {
		name      string
		count     int
		memoryMiB int64
		eligible  gpu.DeviceSet
		want      gpu.Demand
		ok        bool
	}{
		{name: "two devices without capacity: two whole GPUs", count: 2, eligible: all,
			want: gpu.Demand{Count: 2, Milli: 1000, MilliCPU: 4000, HostMemoryMiB: 8192}, ok: true},
		{name: "one device, 20480 MiB: ceil(1000 × 20480 / 81920) = 250", count: 1, memoryMiB: 20480, eligible: all,
			want: gpu.Demand{Count: 1, Milli: 250, MemoryMiB: 20480, MilliCPU: 4000, HostMemoryMiB: 8192}, ok: true},
		{name: "one device, 10000 MiB: ceil(1000 × 10000 / 81920) = ceil(122.07) = 123", count: 1, memoryMiB: 10000, eligible: 0b0010,
			want: gpu.Demand{Count: 1, Milli: 123, MemoryMiB: 10000, MilliCPU: 4000, HostMemoryMiB: 8192}, ok: true},
		{name: "all of a GPU's memory is the whole GPU", count: 1, memoryMiB: 81920, eligible: all,
			want: gpu.Demand{Count: 1, Milli: 1000, MilliCPU: 4000, HostMemoryMiB: 8192}, ok: true},
		{name: "memory on each of two devices: whole GPUs", count: 2, memoryMiB: 81920, eligible: all,
			want: gpu.Demand{Count: 2, Milli: 1000, MilliCPU: 4000, HostMemoryMiB: 8192}, ok: true},
		{name: "a share with no eligible GPU of known memory", count: 1, memoryMiB: 20480, eligible: 0, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := d.DemandOf(tt.count, tt.memoryMiB, tt.eligible, base)
			if ok != tt.ok || (ok && (got.Count != tt.want.Count || got.Milli != tt.want.Milli || got.MemoryMiB != tt.want.MemoryMiB ||
				got.MilliCPU != tt.want.MilliCPU || got.HostMemoryMiB != tt.want.HostMemoryMiB)) {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
