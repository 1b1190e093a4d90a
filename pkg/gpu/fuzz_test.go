package gpu_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// FuzzDemandFromPod: any annotation values give either a demand within its
// documented bounds or only *InvalidValueErrors; never a panic.
// Seed corpus: testdata/fuzz/FuzzDemandFromPod.
func FuzzDemandFromPod(f *testing.F) {
	f.Add("250", "20Gi", `["NVIDIA-A100-SXM4-80GB"]`, int64(0))
	f.Add("", "20480", "T4,L4", int64(2))
	f.Add("999", "1e3", "[]", int64(0))
	f.Fuzz(func(t *testing.T, milli, memory, models string, whole int64) {
		w := gt.MakeGPUPod("p")
		if whole >= 0 && whole <= 64 {
			w.GPUs(int(whole))
		}
		for key, value := range map[string]string{gpu.AnnotationMilli: milli, gpu.AnnotationMemory: memory, gpu.AnnotationModels: models} {
			if value != "" {
				w.Annotation(key, value)
			}
		}
		d, err := gpu.DemandFromPod(w.Obj())
		if err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var iv *gpu.InvalidValueError
				if !errors.As(e, &iv) {
					t.Fatalf("error %v is not an InvalidValueError", e)
				}
			}
			return
		}
		if d.Count < 0 || d.Count > gpu.MaxDevicesPerNode || d.Milli < 1 || d.Milli > gpu.MilliPerGPU || d.MemoryMiB < 0 ||
			(d.IsZero() && (d.MemoryMiB != 0 || len(d.Models) != 0)) || (d.Milli < gpu.MilliPerGPU && d.Count != 1) {
			t.Fatalf("demand out of bounds: %+v", d)
		}
	})
}

// FuzzParseAssignment: whatever parses renders back to a value that parses to
// the same assignment.
// Seed corpus: testdata/fuzz/FuzzParseAssignment.
func FuzzParseAssignment(f *testing.F) {
	f.Add("node=n1;gpus=0,1;milli=1000;memory=0;uuids=GPU-a,GPU-b")
	f.Add("node=n1;gpus=3;milli=250;memory=10240")
	f.Add("gpus=1;node=x;future=ignored")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := gpu.ParseAssignment(s)
		if err != nil {
			var iv *gpu.InvalidValueError
			if !errors.As(err, &iv) || iv.Field != gpu.AnnotationAssigned {
				t.Fatalf("error %v does not name %s", err, gpu.AnnotationAssigned)
			}
			return
		}
		again, err := gpu.ParseAssignment(a.String())
		if err != nil {
			t.Fatalf("%q parsed, but its rendering %q does not: %v", s, a.String(), err)
		}
		if !reflect.DeepEqual(a, again) {
			t.Fatalf("round trip changed %+v into %+v", a, again)
		}
	})
}

// FuzzInventoryFromNode: any device annotation gives a valid inventory or an
// InvalidValueError naming the annotation.
// Seed corpus: testdata/fuzz/FuzzInventoryFromNode.
func FuzzInventoryFromNode(f *testing.F) {
	f.Add(`[{"index":0,"uuid":"GPU-a","model":"H100","memoryMiB":81559,"group":"nvl0"}]`)
	f.Add(`[{"index":-1}]`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, raw string) {
		inv, err := gpu.InventoryFromNode(gt.MakeGPUNode("n").Annotation(gpu.AnnotationDevices, raw).Obj())
		if err != nil {
			var iv *gpu.InvalidValueError
			if !errors.As(err, &iv) || iv.Field != gpu.AnnotationDevices {
				t.Fatalf("error %v does not name %s", err, gpu.AnnotationDevices)
			}
			return
		}
		if inv.Len() > gpu.MaxDevicesPerNode {
			t.Fatalf("%d devices accepted", inv.Len())
		}
		for _, d := range inv.Devices {
			if d.Index < 0 || d.MemoryMiB < 0 {
				t.Fatalf("device out of bounds: %+v", d)
			}
		}
	})
}
