package e2e

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// gpuAssignment is the device list of a bound pod's assignment.
func gpuAssignment(pod *v1.Pod) ([]int, error) {
	raw, ok := pod.Annotations[gpu.AnnotationAssigned]
	if !ok {
		return nil, fmt.Errorf("pod %s has no assignment", pod.Name)
	}
	a, err := gpu.ParseAssignment(raw)
	if err != nil {
		return nil, err
	}
	return slices.Clone(a.Devices), nil
}
