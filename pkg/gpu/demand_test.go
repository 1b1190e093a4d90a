package gpu_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestDemandFromPod(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	withInit := func(n int64, sidecar bool) *v1.Pod {
		p := gt.MakeGPUPod("p").GPUs(1).Obj()
		c := v1.Container{Name: "init", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
			gpu.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}}}
		if sidecar {
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = []v1.Container{c}
		return p
	}
	twoContainers := func(name v1.ResourceName, a, b int64) *v1.Pod {
		p := gt.MakeGPUPod("p").Obj()
		c := p.Spec.Containers[0]
		c.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{name: *resource.NewQuantity(a, resource.DecimalSI)}}
		d := *c.DeepCopy()
		d.Name = "second"
		d.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{name: *resource.NewQuantity(b, resource.DecimalSI)}}
		p.Spec.Containers = []v1.Container{c, d}
		return p
	}
	// initAfterSidecar: a sidecar, then an ordinary init container, then the
	// app container, each asking for a share as a resource.
	initAfterSidecar := func(sidecar, init, app int64) *v1.Pod {
		p := gt.MakeGPUPod("p").MilliResource(app).Obj()
		limit := func(n int64) v1.ResourceRequirements {
			return v1.ResourceRequirements{Limits: v1.ResourceList{gpu.ResourceMilli: *resource.NewQuantity(n, resource.DecimalSI)}}
		}
		p.Spec.InitContainers = []v1.Container{
			{Name: "sidecar", RestartPolicy: &always, Resources: limit(sidecar)},
			{Name: "init", Resources: limit(init)},
		}
		return p
	}
	tests := []struct {
		name       string
		pod        *v1.Pod
		want       gpu.Demand
		wantFields []string // fields named by the InvalidValueErrors, in order
	}{
		{name: "no GPU", pod: gt.MakeGPUPod("p").CPU("1").Obj(), want: gpu.Demand{Milli: 1000}},
		{name: "two whole GPUs", pod: gt.MakeGPUPod("p").GPUs(2).Obj(), want: gpu.Demand{Count: 2, Milli: 1000}},
		{
			name: "share with memory in MiB and models as JSON",
			pod:  gt.MakeGPUPod("p").Milli(250).GPUMemory("10240").Models("A100, 80GB", "H100").Obj(),
			want: gpu.Demand{Count: 1, Milli: 250, MemoryMiB: 10240, Models: []string{"A100, 80GB", "H100"}},
		},
		{
			name: "memory as a quantity rounds up to MiB; models as a list",
			pod:  gt.MakeGPUPod("p").GPUs(1).GPUMemory("1.5Gi").Annotation(gpu.AnnotationModels, " T4 , L4,").Obj(),
			want: gpu.Demand{Count: 1, Milli: 1000, MemoryMiB: 1536, Models: []string{"T4", "L4"}},
		},
		{name: "a larger init container decides", pod: withInit(3, false), want: gpu.Demand{Count: 3, Milli: 1000}},
		{name: "a sidecar adds to the app containers", pod: withInit(1, true), want: gpu.Demand{Count: 2, Milli: 1000}},
		{name: "milli out of range", pod: gt.MakeGPUPod("p").Milli(1000).Obj(), wantFields: []string{gpu.AnnotationMilli}},
		{name: "milli not a number", pod: gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "half").Obj(), wantFields: []string{gpu.AnnotationMilli}},
		{name: "milli with whole GPUs", pod: gt.MakeGPUPod("p").GPUs(1).Milli(500).Obj(), wantFields: []string{gpu.AnnotationMilli}},
		{name: "memory zero", pod: gt.MakeGPUPod("p").GPUs(1).GPUMemory("0").Obj(), wantFields: []string{gpu.AnnotationMemory}},
		{name: "memory garbage", pod: gt.MakeGPUPod("p").GPUs(1).GPUMemory("lots").Obj(), wantFields: []string{gpu.AnnotationMemory}},
		{name: "models empty", pod: gt.MakeGPUPod("p").GPUs(1).Annotation(gpu.AnnotationModels, " , ").Obj(), wantFields: []string{gpu.AnnotationModels}},
		{name: "models bad JSON", pod: gt.MakeGPUPod("p").GPUs(1).Annotation(gpu.AnnotationModels, `["A100"`).Obj(), wantFields: []string{gpu.AnnotationModels}},
		{name: "memory without any GPU", pod: gt.MakeGPUPod("p").GPUMemory("1Gi").Obj(), wantFields: []string{gpu.AnnotationMemory}},
		// The quota-counted form reads as the annotations do.
		{name: "share as a resource", pod: gt.MakeGPUPod("p").MilliResource(250).MemoryResource(10240).Obj(),
			want: gpu.Demand{Count: 1, Milli: 250, MemoryMiB: 10240}},
		{name: "both forms agree", pod: gt.MakeGPUPod("p").MilliResource(250).Milli(250).MemoryResource(1536).GPUMemory("1.5Gi").Obj(),
			want: gpu.Demand{Count: 1, Milli: 250, MemoryMiB: 1536}},
		{name: "a share summed over containers", pod: twoContainers(gpu.ResourceMilli, 300, 200),
			want: gpu.Demand{Count: 1, Milli: 500}},
		{name: "resource share of zero is no share", pod: gt.MakeGPUPod("p").MilliResource(0).Obj(), want: gpu.Demand{Milli: 1000}},
		{name: "share forms disagree", pod: gt.MakeGPUPod("p").MilliResource(250).Milli(999).Obj(), wantFields: []string{gpu.AnnotationMilli}},
		{name: "memory forms disagree", pod: gt.MakeGPUPod("p").MilliResource(250).MemoryResource(1024).GPUMemory("2Gi").Obj(),
			wantFields: []string{gpu.AnnotationMemory}},
		{name: "resource share over 999 summed", pod: twoContainers(gpu.ResourceMilli, 600, 600), wantFields: []string{string(gpu.ResourceMilli)}},
		{name: "resource share of a whole GPU", pod: gt.MakeGPUPod("p").MilliResource(1000).Obj(), wantFields: []string{string(gpu.ResourceMilli)}},
		{name: "resource share with whole GPUs", pod: gt.MakeGPUPod("p").GPUs(1).MilliResource(500).Obj(), wantFields: []string{string(gpu.ResourceMilli)}},
		{name: "memory resource on whole GPUs", pod: gt.MakeGPUPod("p").GPUs(1).MemoryResource(1024).Obj(), wantFields: []string{string(gpu.ResourceMemoryMiB)}},
		{name: "memory resource without any GPU", pod: gt.MakeGPUPod("p").MemoryResource(1024).Obj(), wantFields: []string{string(gpu.ResourceMemoryMiB)}},
		{name: "a resource share's memory by annotation", pod: gt.MakeGPUPod("p").MilliResource(250).GPUMemory("80Gi").Obj(),
			wantFields: []string{gpu.AnnotationMemory}},
		// An ordinary init container runs beside the sidecars declared
		// before it: 400 + 500 = 900 > the app's 100 + 500 = 600.
		{name: "an init container after a sidecar", pod: initAfterSidecar(500, 400, 100), want: gpu.Demand{Count: 1, Milli: 900}},
		// 999 + 500 = 1499: more than one GPU, as quota counts it.
		{name: "an init container after a sidecar past one GPU", pod: initAfterSidecar(500, 999, 100), wantFields: []string{string(gpu.ResourceMilli)}},
		{name: "memory resource in milli-units", pod: func() *v1.Pod {
			p := gt.MakeGPUPod("p").MilliResource(250).Obj()
			p.Spec.Containers[0].Resources.Limits[gpu.ResourceMemoryMiB] = resource.MustParse("1500m")
			return p
		}(), wantFields: []string{string(gpu.ResourceMemoryMiB)}},
		{
			name:       "every malformed value is reported",
			pod:        gt.MakeGPUPod("p").Milli(0).GPUMemory("-1").Annotation(gpu.AnnotationModels, "[]").Obj(),
			wantFields: []string{gpu.AnnotationMilli, gpu.AnnotationMemory, gpu.AnnotationModels},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gpu.DemandFromPod(tt.pod)
			if len(tt.wantFields) > 0 {
				if got := invalidFields(err); !reflect.DeepEqual(got, tt.wantFields) {
					t.Fatalf("error %v names fields %v, want %v", err, got, tt.wantFields)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("demand = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// invalidFields lists the fields named by the InvalidValueErrors joined in err.
func invalidFields(err error) []string {
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var fields []string
	for _, e := range errs {
		var iv *gpu.InvalidValueError
		if errors.As(e, &iv) && strings.Contains(e.Error(), iv.Field) {
			fields = append(fields, iv.Field)
		}
	}
	return fields
}

func TestDemandAllowsModel(t *testing.T) {
	d := gpu.Demand{Count: 1, Milli: 1000, Models: []string{"nvidia-a100-sxm4-80gb"}}
	if !d.AllowsModel("NVIDIA-A100-SXM4-80GB") {
		t.Error("model match must ignore case")
	}
	if d.AllowsModel("NVIDIA-A100-SXM4-40GB") {
		t.Error("a different model must not match")
	}
	if any := (gpu.Demand{Count: 1}); !any.AllowsModel("anything") {
		t.Error("an empty model list allows every model")
	}
}

// TestPackingItems: what the packing LP counts of a demand.
func TestPackingItems(t *testing.T) {
	for _, tt := range []struct {
		d    gpu.Demand
		size int64
		n    int
	}{
		{gpu.Demand{Count: 1, Milli: 470}, 470, 1},
		{gpu.Demand{Count: 4, Milli: 1000}, 1000, 4},
		{gpu.Demand{Count: 1, Milli: 1000}, 1000, 1},
		{gpu.Demand{MilliCPU: 4000}, 0, 0},
		{gpu.Demand{Count: 1}, 0, 0}, // no milli-GPU: nothing to pack
	} {
		if size, n := tt.d.PackingItems(); size != tt.size || n != tt.n {
			t.Errorf("%+v: %d items of %d, want %d of %d", tt.d, n, size, tt.n, tt.size)
		}
	}
}
