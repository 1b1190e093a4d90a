package gpu_test

import (
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

const h100DRA = "NVIDIA H100 80GB HBM3" // NVML's product name, as the driver publishes it

var nvidia = gpu.DRASource{Driver: gpu.DefaultDRADriver}

func id(pool, dev string) gpu.DRADeviceID {
	return gpu.DRADeviceID{Driver: gpu.DefaultDRADriver, Pool: pool, Device: dev}
}

// TestInventoryFromResourceSlices: NVIDIA-shaped slices become the same
// inventory GFD labels would give, in the allocator's device order.
func TestInventoryFromResourceSlices(t *testing.T) {
	h100 := gpu.Device{Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559}
	dev := func(i int, uuid, group string) gpu.Device {
		d := h100
		d.Index, d.UUID, d.Group = i, uuid, group
		return d
	}
	tests := []struct {
		name    string
		slices  []*resourceapi.ResourceSlice
		src     gpu.DRASource
		want    []gpu.Device
		wantIDs []gpu.DRADeviceID
	}{{
		name: "full GPUs, in slice order (the driver's order, not the minors')",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			GPU(1, "GPU-1", h100DRA, 81559, "pci0000:29").GPU(0, "GPU-0", h100DRA, 81559, "pci0000:17").Obj()},
		want:    []gpu.Device{dev(0, "GPU-1", "pci0000:29"), dev(1, "GPU-0", "pci0000:17")},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-1"), id("node-a", "gpu-0")},
	}, {
		name: "other nodes, other drivers and node-less slices are ignored",
		slices: []*resourceapi.ResourceSlice{
			gt.MakeNVIDIASlice("b", "node-b").GPU(0, "GPU-B", h100DRA, 81559, "").Obj(),
			gt.MakeNVIDIASlice("cd", "node-a").Driver("compute-domain.nvidia.com").GPU(0, "GPU-X", h100DRA, 81559, "").Obj(),
			func() *resourceapi.ResourceSlice {
				s := gt.MakeNVIDIASlice("net", "node-a").GPU(7, "GPU-N", h100DRA, 81559, "").Obj()
				s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
				return s
			}(),
			gt.MakeNVIDIASlice("a", "node-a").GPU(0, "GPU-A", h100DRA, 81559, "").Obj(),
		},
		want:    []gpu.Device{dev(0, "GPU-A", "")},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-0")},
	}, {
		name: "several pools sorted by name, slices by name, newest generation only",
		slices: []*resourceapi.ResourceSlice{
			gt.MakeNVIDIASlice("z-old", "node-a").Pool("p2", 1, 1).GPU(9, "GPU-OLD", h100DRA, 81559, "").Obj(),
			gt.MakeNVIDIASlice("z-new", "node-a").Pool("p2", 2, 2).GPU(3, "GPU-3", h100DRA, 81559, "").Obj(),
			gt.MakeNVIDIASlice("a-new", "node-a").Pool("p2", 2, 2).GPU(2, "GPU-2", h100DRA, 81559, "").Obj(),
			gt.MakeNVIDIASlice("only", "node-a").Pool("p1", 5, 1).GPU(0, "GPU-0", h100DRA, 81559, "").Obj(),
		},
		want:    []gpu.Device{dev(0, "GPU-0", ""), dev(1, "GPU-2", ""), dev(2, "GPU-3", "")},
		wantIDs: []gpu.DRADeviceID{id("p1", "gpu-0"), id("p2", "gpu-2"), id("p2", "gpu-3")},
	}, {
		name: "MIG devices fold onto their parent: no inventory rows",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			MIG(0, "GPU-0", "1g.10gb", 0, 9856).GPU(0, "GPU-0", h100DRA, 81559, "").MIG(0, "GPU-0", "3g.40gb", 4, 40192).Obj()},
		want:    []gpu.Device{dev(0, "GPU-0", "")},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-0")},
	}, {
		name:    "consumable memory: the device is still one GPU",
		slices:  []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").GPU(0, "GPU-0", h100DRA, 81559, "r0").Shared().Obj()},
		want:    []gpu.Device{dev(0, "GPU-0", "r0")},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-0")},
	}, {
		name: "group from the first configured attribute present; ints as text; attributes in the driver's domain",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			GPU(0, "GPU-0", h100DRA, 81559, "pci0000:17").Attr("gpu-0", "gpu.nvidia.com/partition8", resourceapi.DeviceAttribute{IntValue: ptr.To(int64(3))}).
			GPU(1, "GPU-1", h100DRA, 81559, "pci0000:29").Obj()},
		src:     gpu.DRASource{Driver: gpu.DefaultDRADriver, GroupAttributes: []resourceapi.QualifiedName{"partition8", "resource.kubernetes.io/pcieRoot"}},
		want:    []gpu.Device{dev(0, "GPU-0", "3"), dev(1, "GPU-1", "pci0000:29")},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-0"), id("node-a", "gpu-1")},
	}, {
		name: "a NoSchedule taint marks the GPU unhealthy; a None taint does not",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			GPU(0, "GPU-0", h100DRA, 81559, "").Taint("gpu-0", "gpu.nvidia.com/unmonitored", "", resourceapi.DeviceTaintEffectNone).
			GPU(1, "GPU-1", h100DRA, 81559, "").Taint("gpu-1", "gpu.nvidia.com/xid", "79", resourceapi.DeviceTaintEffectNoSchedule).Obj()},
		want: []gpu.Device{dev(0, "GPU-0", ""), func() gpu.Device {
			d := dev(1, "GPU-1", "")
			d.Unhealthy = "gpu.nvidia.com/xid=79:NoSchedule"
			return d
		}()},
		wantIDs: []gpu.DRADeviceID{id("node-a", "gpu-0"), id("node-a", "gpu-1")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src.Driver == "" {
				src = nvidia
			}
			d, problems := gpu.InventoryFromSlices("node-a", tt.slices, src)
			if len(problems) > 0 {
				t.Errorf("problems: %v", problems)
			}
			if d == nil {
				t.Fatal("no inventory")
			}
			if !reflect.DeepEqual(d.Inventory.Devices, tt.want) {
				t.Errorf("devices:\n got %+v\nwant %+v", d.Inventory.Devices, tt.want)
			}
			if !reflect.DeepEqual(d.IDs, tt.wantIDs) {
				t.Errorf("IDs: got %v, want %v", d.IDs, tt.wantIDs)
			}
		})
	}
}

// TestResourceSliceProblems: what cannot be read is skipped and named
// (slice and field); the rest is read.
func TestResourceSliceProblems(t *testing.T) {
	tests := []struct {
		name      string
		slices    []*resourceapi.ResourceSlice
		wantUUIDs []string
		want      []string // one substring per problem, in order
	}{{
		name: "uuid of the wrong kind: the device is kept without a UUID",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").GPU(0, "GPU-0", h100DRA, 81559, "").
			Attr("gpu-0", "uuid", resourceapi.DeviceAttribute{IntValue: ptr.To(int64(7))}).Obj()},
		wantUUIDs: []string{""},
		want:      []string{"s0: spec.devices[gpu-0].attributes[uuid]: want a string value, got int 7"},
	}, {
		name: "unknown type and type of the wrong kind: skipped",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			GPU(0, "GPU-0", h100DRA, 81559, "").Attr("gpu-0", "type", resourceapi.DeviceAttribute{StringValue: ptr.To("vfio")}).
			GPU(1, "GPU-1", h100DRA, 81559, "").Attr("gpu-1", "type", resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}).
			GPU(2, "GPU-2", h100DRA, 81559, "").Obj()},
		wantUUIDs: []string{"GPU-2"},
		want: []string{`s0: spec.devices[gpu-0].attributes[type]: unknown device type "vfio"`,
			"s0: spec.devices[gpu-1].attributes[type]: want a string value, got bool true"},
	}, {
		name: "negative memory: unknown memory",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").GPU(0, "GPU-0", h100DRA, 81559, "").
			Capacity("gpu-0", "memory", "-1Gi").Obj()},
		wantUUIDs: []string{"GPU-0"},
		want:      []string{"s0: spec.devices[gpu-0].capacity[memory]: negative memory -1Gi"},
	}, {
		name: "a group attribute of the wrong kind: no group",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").GPU(0, "GPU-0", h100DRA, 81559, "").
			Attr("gpu-0", "resource.kubernetes.io/pcieRoot", resourceapi.DeviceAttribute{BoolValue: ptr.To(false)}).Obj()},
		wantUUIDs: []string{"GPU-0"},
		want:      []string{"s0: spec.devices[gpu-0].attributes[resource.kubernetes.io/pcieRoot]: want a string or int value"},
	}, {
		name: "incomplete newest generation: the pool is skipped",
		slices: []*resourceapi.ResourceSlice{
			gt.MakeNVIDIASlice("old", "node-a").Pool("node-a", 1, 1).GPU(0, "GPU-0", h100DRA, 81559, "").Obj(),
			gt.MakeNVIDIASlice("new", "node-a").Pool("node-a", 2, 2).GPU(0, "GPU-0", h100DRA, 81559, "").Obj(),
		},
		want: []string{`new: spec.pool.resourceSliceCount: pool "node-a" generation 2 has 1 of 2 slices`},
	}, {
		name: "a MIG device whose parent is not published, and a UUID published twice",
		slices: []*resourceapi.ResourceSlice{gt.MakeNVIDIASlice("s0", "node-a").
			GPU(0, "GPU-0", h100DRA, 81559, "").GPU(1, "GPU-0", h100DRA, 81559, "").MIG(5, "GPU-5", "1g.10gb", 0, 9856).Obj()},
		wantUUIDs: []string{"GPU-0"},
		want: []string{`s0: spec.devices[gpu-1].attributes[uuid]: UUID "GPU-0" is published twice`,
			`s0: spec.devices[gpu-5-mig-1g.10gb-0].attributes[parentUUID]: parent GPU "GPU-5" is not published`},
	}, {
		name: "more than 64 GPUs: the rest are skipped",
		slices: func() []*resourceapi.ResourceSlice {
			w := gt.MakeNVIDIASlice("big", "node-a")
			for i := range 65 {
				w.GPU(i, "GPU-"+string(rune('A'+i)), h100DRA, 81559, "")
			}
			return []*resourceapi.ResourceSlice{w.Obj()}
		}(),
		wantUUIDs: func() []string {
			var out []string
			for i := range 64 {
				out = append(out, "GPU-"+string(rune('A'+i)))
			}
			return out
		}(),
		want: []string{"big: spec.devices[gpu-64]: more than 64 GPUs on one node"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, problems := gpu.InventoryFromSlices("node-a", tt.slices, nvidia)
			var uuids []string
			for _, dev := range d.Inventory.Devices {
				uuids = append(uuids, dev.UUID)
			}
			if !reflect.DeepEqual(uuids, tt.wantUUIDs) {
				t.Errorf("UUIDs: got %q, want %q", uuids, tt.wantUUIDs)
			}
			if len(problems) != len(tt.want) {
				t.Fatalf("problems: got %v, want %d", problems, len(tt.want))
			}
			for i, p := range problems {
				if !strings.Contains(p.String(), tt.want[i]) {
					t.Errorf("problem %d: %q does not contain %q", i, p.String(), tt.want[i])
				}
			}
		})
	}
}

// TestResourceSliceNoneForNode: a node without slices of the driver has no
// DRA inventory at all (nil), so its GPUs are read the other ways.
func TestResourceSliceNoneForNode(t *testing.T) {
	s := gt.MakeNVIDIASlice("s0", "node-b").GPU(0, "GPU-0", h100DRA, 81559, "").Obj()
	if d, problems := gpu.InventoryFromSlices("node-a", []*resourceapi.ResourceSlice{s}, nvidia); d != nil || problems != nil {
		t.Errorf("got %+v, %v; want nil", d, problems)
	}
}
