package trace

import (
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// podsPerNode is the pod capacity of a trace node: high enough that the
// pod count never limits placement, as the trace has no such limit.
const podsPerNode = 1000

// Namespace holds the simulated pods.
const Namespace = "default"

// NewNode builds the Node object of a trace row: its CPU and memory as
// allocatable, its GPUs as nvidia.com/gpu with GPU Feature Discovery labels
// for the model and count, so the engine reads it as any real node.
func NewNode(name string, milliCPU, memoryMiB int64, gpus int, model string) *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			UID:             types.UID("node-" + name),
			ResourceVersion: "1",
			Labels:          map[string]string{v1.LabelHostname: name},
		},
		Status: v1.NodeStatus{
			Allocatable: v1.ResourceList{
				v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
				v1.ResourceMemory: *resource.NewQuantity(memoryMiB<<20, resource.BinarySI),
				v1.ResourcePods:   *resource.NewQuantity(podsPerNode, resource.DecimalSI),
			},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
	if gpus > 0 {
		node.Labels[gpu.LabelProduct] = model
		node.Labels[gpu.LabelCount] = strconv.Itoa(gpus)
		node.Status.Allocatable[gpu.ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	}
	node.Status.Capacity = node.Status.Allocatable.DeepCopy()
	return node
}

// NewPod builds the Pod object of a trace row. Whole GPUs are requested
// through nvidia.com/gpu; a share of one GPU (gpuMilli below 1000) through
// the gpusched.io/gpu-milli annotation; allowed models through
// gpusched.io/gpu-models. These are the same requests a user's pod makes.
func NewPod(name string, milliCPU, memoryMiB int64, numGPU int, gpuMilli int64, models []string) *v1.Pod {
	requests := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memoryMiB<<20, resource.BinarySI),
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: Namespace,
			UID:       types.UID(name),
		},
		Spec: v1.PodSpec{
			SchedulerName: "gpusched",
			Containers:    []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Requests: requests}}},
		},
	}
	switch {
	case numGPU == 0:
	case gpuMilli >= gpu.MilliPerGPU:
		n := *resource.NewQuantity(int64(numGPU), resource.DecimalSI)
		requests[gpu.ResourceGPU] = n
		pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceGPU: n}
	default:
		setAnnotation(pod, gpu.AnnotationMilli, strconv.FormatInt(gpuMilli, 10))
	}
	if numGPU > 0 && len(models) > 0 {
		setAnnotation(pod, gpu.AnnotationModels, strings.Join(models, ","))
	}
	return pod
}

// SharesAsResources rewrites every pod that asks for a share of a GPU by
// annotation (gpusched.io/gpu-milli, gpu-memory) to ask for it with the
// quota-counted resources instead (gpu.ResourceMilli, gpu.ResourceMemoryMiB,
// as request and limit of its first container), in place. The engine reads
// both forms alike, so the placements are the same.
func SharesAsResources(pods []Pod) {
	for _, tp := range pods {
		pod := tp.Pod
		d, err := gpu.DemandFromPod(pod)
		if err != nil || !d.IsShare() || len(pod.Spec.Containers) == 0 {
			continue
		}
		c := &pod.Spec.Containers[0]
		if c.Resources.Requests == nil {
			c.Resources.Requests = v1.ResourceList{}
		}
		if c.Resources.Limits == nil {
			c.Resources.Limits = v1.ResourceList{}
		}
		set := func(name v1.ResourceName, n int64) {
			c.Resources.Requests[name] = *resource.NewQuantity(n, resource.DecimalSI)
			c.Resources.Limits[name] = *resource.NewQuantity(n, resource.DecimalSI)
		}
		set(gpu.ResourceMilli, d.Milli)
		delete(pod.Annotations, gpu.AnnotationMilli)
		if d.MemoryMiB > 0 {
			set(gpu.ResourceMemoryMiB, d.MemoryMiB)
			delete(pod.Annotations, gpu.AnnotationMemory)
		}
	}
}

func setAnnotation(pod *v1.Pod, key, value string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[key] = value
}
