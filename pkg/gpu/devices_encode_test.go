package gpu_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAgentEncodeDevices: what the node agent writes is read back by
// InventoryFromNode into the same devices; values the engine would refuse are
// refused when encoding, with the annotation named.
func TestAgentEncodeDevices(t *testing.T) {
	tests := []struct {
		name    string
		devices []gpu.Device
		want    string // exact JSON, or "" when an error is expected
		wantErr string
	}{
		{
			name:    "no GPUs is an empty list",
			devices: nil,
			want:    `[]`,
		},
		{
			name: "every field, and omitted optional ones",
			devices: []gpu.Device{
				{Index: 0, UUID: "GPU-a", Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Group: "nvlink-0"},
				{Index: 1, UUID: "GPU-b", Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Group: "nvlink-0", Unhealthy: "XID 79 at 2026-11-24T10:02:11Z"},
				{Index: 2, Model: "T4"},
			},
			want: `[{"index":0,"uuid":"GPU-a","model":"NVIDIA-H100-80GB-HBM3","memoryMiB":81559,"group":"nvlink-0"},` +
				`{"index":1,"uuid":"GPU-b","model":"NVIDIA-H100-80GB-HBM3","memoryMiB":81559,"group":"nvlink-0","unhealthy":"XID 79 at 2026-11-24T10:02:11Z"},` +
				`{"index":2,"model":"T4","memoryMiB":0}]`,
		},
		{
			name:    "repeated index",
			devices: []gpu.Device{{Index: 1}, {Index: 1}},
			wantErr: "GPU index 1 is negative or listed twice",
		},
		{
			name:    "negative memory",
			devices: []gpu.Device{{Index: 0, MemoryMiB: -1}},
			wantErr: "negative memory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gpu.EncodeDevices(tt.devices)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), gpu.AnnotationDevices) {
					t.Fatalf("EncodeDevices error = %v, want one naming %s and containing %q", err, gpu.AnnotationDevices, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("EncodeDevices: %v", err)
			}
			if got != tt.want {
				t.Fatalf("EncodeDevices =\n%s\nwant\n%s", got, tt.want)
			}
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{gpu.AnnotationDevices: got}}}
			inv, err := gpu.InventoryFromNode(node)
			if err != nil {
				t.Fatalf("InventoryFromNode of the encoded value: %v", err)
			}
			want := tt.devices
			if want == nil {
				want = []gpu.Device{}
			}
			if !reflect.DeepEqual(inv.Devices, want) {
				t.Fatalf("read back %+v, want %+v", inv.Devices, want)
			}
		})
	}
}
