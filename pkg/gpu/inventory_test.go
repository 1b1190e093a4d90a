package gpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestInventoryFromNode(t *testing.T) {
	const a100 = "NVIDIA-A100-SXM4-80GB"
	tests := []struct {
		name    string
		node    *gt.NodeWrapper
		want    []gpu.Device
		wantErr string // the field an *InvalidValueError must name
	}{
		{
			name: "no GPU source: empty inventory",
			node: gt.MakeGPUNode("n"),
		},
		{
			name: "GFD labels with clique",
			node: gt.MakeGPUNode("n").GFD(a100, 2, 81920).Clique("c1"),
			want: []gpu.Device{
				{Index: 0, Model: a100, MemoryMiB: 81920, Group: "c1"},
				{Index: 1, Model: a100, MemoryMiB: 81920, Group: "c1"},
			},
		},
		{
			name: "allocatable decides the count over the count label",
			node: gt.MakeGPUNode("n").GFD(a100, 4, 81920).AllocatableGPUs(1),
			want: []gpu.Device{{Index: 0, Model: a100, MemoryMiB: 81920}},
		},
		{
			name: "count label alone, when allocatable is absent",
			node: gt.MakeGPUNode("n").Label(gpu.LabelCount, "1").Label(gpu.LabelProduct, "T4"),
			want: []gpu.Device{{Index: 0, Model: "T4"}},
		},
		{
			name: "device annotation takes precedence over labels",
			node: gt.MakeGPUNode("n").GFD(a100, 2, 81920).Devices(
				gpu.Device{Index: 0, UUID: "GPU-a", Model: "H100", MemoryMiB: 81559, Group: "nvl0"},
				gpu.Device{Index: 1, UUID: "GPU-b", Model: "L4", MemoryMiB: 23034, Group: "pcie"},
			),
			want: []gpu.Device{
				{Index: 0, UUID: "GPU-a", Model: "H100", MemoryMiB: 81559, Group: "nvl0"},
				{Index: 1, UUID: "GPU-b", Model: "L4", MemoryMiB: 23034, Group: "pcie"},
			},
		},
		{
			name:    "annotation that is not JSON",
			node:    gt.MakeGPUNode("n").Annotation(gpu.AnnotationDevices, "0:A100"),
			wantErr: gpu.AnnotationDevices,
		},
		{
			name:    "annotation with a repeated index",
			node:    gt.MakeGPUNode("n").Devices(gpu.Device{Index: 1}, gpu.Device{Index: 1}),
			wantErr: gpu.AnnotationDevices,
		},
		{
			// The device plugin withdrew the unhealthy GPU: 2 listed, 1 healthy, allocatable 1.
			name: "allocatable counting only the healthy GPUs",
			node: gt.MakeGPUNode("n").Devices(gpu.Device{Index: 0}, gpu.Device{Index: 1, Unhealthy: "XID 79"}).AllocatableGPUs(1),
			want: []gpu.Device{{Index: 0}, {Index: 1, Unhealthy: "XID 79"}},
		},
		{
			// 3 listed, 2 healthy: allocatable 1 is neither.
			name:    "allocatable below the healthy GPUs",
			node:    gt.MakeGPUNode("n").Devices(gpu.Device{Index: 0}, gpu.Device{Index: 1}, gpu.Device{Index: 2, Unhealthy: "XID 48"}).AllocatableGPUs(1),
			wantErr: gpu.AnnotationDevices,
		},
		{
			name:    "annotation disagreeing with allocatable",
			node:    gt.MakeGPUNode("n").Devices(gpu.Device{Index: 0}, gpu.Device{Index: 1}).AllocatableGPUs(1),
			wantErr: gpu.AnnotationDevices,
		},
		{
			name:    "memory label not a number",
			node:    gt.MakeGPUNode("n").GFD(a100, 1, 0).Label(gpu.LabelMemory, "80GB"),
			wantErr: gpu.LabelMemory,
		},
		{
			name:    "count label not a number",
			node:    gt.MakeGPUNode("n").Label(gpu.LabelCount, "eight"),
			wantErr: gpu.LabelCount,
		},
		{
			name:    "more GPUs than a node may have",
			node:    gt.MakeGPUNode("n").AllocatableGPUs(65),
			wantErr: string(gpu.ResourceGPU),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := gpu.InventoryFromNode(tt.node.Obj())
			if tt.wantErr != "" {
				var iv *gpu.InvalidValueError
				if !errors.As(err, &iv) || iv.Field != tt.wantErr {
					t.Fatalf("error = %v, want an InvalidValueError naming %s", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("message %q does not name %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != len(tt.want) {
				t.Fatalf("devices = %+v, want %+v", inv.Devices, tt.want)
			}
			for i := range tt.want {
				if inv.Devices[i] != tt.want[i] {
					t.Errorf("device %d = %+v, want %+v", i, inv.Devices[i], tt.want[i])
				}
			}
		})
	}
}
