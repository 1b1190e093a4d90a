package gpu_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestFillHost: CPU as the scheduler scores it (100m for a container
// without a CPU request), memory as requested.
func TestFillHost(t *testing.T) {
	container := func(cpu, memory string) v1.Container {
		c := v1.Container{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}
		if cpu != "" {
			c.Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			c.Resources.Requests[v1.ResourceMemory] = resource.MustParse(memory)
		}
		return c
	}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{container("2", "1Gi"), container("", "512Mi")}}}
	var d gpu.Demand
	d.FillHost(pod)
	// CPU: 2000m + 100m for the container without a request; memory:
	// 1024 + 512 MiB.
	if d.MilliCPU != 2100 || d.HostMemoryMiB != 1536 {
		t.Errorf("host = %dm, %d MiB; want 2100m, 1536 MiB", d.MilliCPU, d.HostMemoryMiB)
	}
	// The pod's own request, as a node's sum counts it, has no default.
	if cpu, mem := gpu.PodRequests(pod); cpu != 2000 || mem != 1536<<20 {
		t.Errorf("requests = %dm, %d B; want 2000m, %d B", cpu, mem, 1536<<20)
	}
}

// TestRequestsOnNode: a pod counts on its node as the scheduler's NodeInfo
// counts it: its requests, or for a container resized in place the larger
// of its spec and what its status says it was given.
func TestRequestsOnNode(t *testing.T) {
	pod := func(spec, status string) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(spec)}}}}}}
		if status != "" {
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c",
				AllocatedResources: v1.ResourceList{v1.ResourceCPU: resource.MustParse(status)},
				Resources:          &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(status)}}}}
		}
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want int64 // milli-CPU
	}{
		{"no status: the spec", pod("4", ""), 4000},
		{"resized up, 4 to 58: the status", pod("4", "58"), 58000},
		{"resized down, spec 8, status 2: the larger, the spec", pod("8", "2"), 8000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requests := gpu.RequestsOnNode(tt.pod)
			if got := requests.Cpu().MilliValue(); got != tt.want {
				t.Errorf("RequestsOnNode = %dm CPU, want %dm", got, tt.want)
			}
			if cpu, _ := gpu.PodRequests(tt.pod); cpu != tt.want {
				t.Errorf("PodRequests = %dm CPU, want %dm", cpu, tt.want)
			}
		})
	}
}
