package discovery_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// FuzzAgentDevicesAnnotation: any list of devices either becomes a snapshot
// whose gpu-devices annotation the engine reads back into the same devices,
// or is refused with an error; never a panic.
func FuzzAgentDevicesAnnotation(f *testing.F) {
	f.Add(`[{"index":0,"uuid":"GPU-a","model":"NVIDIA-H100-80GB-HBM3","memoryMiB":81559,"group":"nvlink-0"}]`)
	f.Add(`[{"index":0,"uuid":"GPU-a"},{"index":1,"uuid":"GPU-a"}]`)
	f.Add(`[{"index":-1}]`)
	f.Add(`[{"index":3,"unhealthy":"XID 79 at 2026-11-24T10:02:11Z"},{"index":1}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		var devices []gpu.Device
		if json.Unmarshal([]byte(raw), &devices) != nil {
			return
		}
		snap, err := discovery.SnapshotOf(devices)
		if err != nil {
			if !strings.Contains(err.Error(), gpu.AnnotationDevices) && !strings.Contains(err.Error(), "GPU UUID") {
				t.Fatalf("error %q names neither the annotation nor the UUID", err)
			}
			return
		}
		inv, err := gpu.InventoryFromNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpu.AnnotationDevices: snap.Annotation}}})
		if err != nil {
			t.Fatalf("the engine refuses %q: %v", snap.Annotation, err)
		}
		want := devices
		if want == nil {
			want = []gpu.Device{}
		}
		if !reflect.DeepEqual(inv.Devices, want) {
			t.Fatalf("read back %+v, want %+v", inv.Devices, want)
		}
		for _, d := range devices {
			if got, ok := snap.ByIndex(d.Index); !ok || got != d {
				t.Fatalf("ByIndex(%d) = %+v, %v", d.Index, got, ok)
			}
		}
	})
}
