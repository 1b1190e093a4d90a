package podrequests

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestRequests(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("2Gi")}}},
		{Name: "b"}, // no requests
	}}}
	// Actual: 1500m; scored: 1500m + 100m for the container without a request.
	if got := MilliCPU(pod); got != 1500 {
		t.Errorf("MilliCPU = %d, want 1500", got)
	}
	if got := ScoredMilliCPU(pod); got != 1600 {
		t.Errorf("ScoredMilliCPU = %d, want 1600", got)
	}
	var d gpu.Demand
	FillHost(&d, pod)
	if d.MilliCPU != 1600 || d.HostMemoryMiB != 2048 {
		t.Errorf("FillHost: %d milli-CPU, %d MiB; want 1600, 2048", d.MilliCPU, d.HostMemoryMiB)
	}
}
