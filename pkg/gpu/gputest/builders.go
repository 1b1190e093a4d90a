// Package gputest builds GPU nodes and GPU pods for tests, fluently:
//
//	node := gputest.MakeGPUNode("a100-0").GFD("NVIDIA-A100-SXM4-80GB", 8, 81920).Obj()
//	pod := gputest.MakeGPUPod("train").GPUs(2).Models("NVIDIA-A100-SXM4-80GB").Obj()
package gputest

import (
	"encoding/json"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// NodeWrapper builds a Node.
type NodeWrapper struct{ v1.Node }

// MakeGPUNode starts a Ready node with 64 CPUs, 512Gi of memory and 110 pods
// allocatable, and no GPUs.
func MakeGPUNode(name string) *NodeWrapper {
	w := &NodeWrapper{v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
	}}
	w.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	w.Status.Allocatable = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	w.Status.Capacity = w.Status.Allocatable.DeepCopy()
	return w
}

// GFD gives the node count GPUs of one model as GPU Feature Discovery and the
// device plugin advertise them: product, memory and count labels, and
// allocatable nvidia.com/gpu.
func (w *NodeWrapper) GFD(model string, count int, memoryMiB int64) *NodeWrapper {
	w.Labels[gpu.LabelProduct] = model
	w.Labels[gpu.LabelMemory] = strconv.FormatInt(memoryMiB, 10)
	w.Labels[gpu.LabelCount] = strconv.Itoa(count)
	return w.AllocatableGPUs(count)
}

// AllocatableGPUs sets status.allocatable and capacity of nvidia.com/gpu.
func (w *NodeWrapper) AllocatableGPUs(count int) *NodeWrapper {
	q := *resource.NewQuantity(int64(count), resource.DecimalSI)
	w.Status.Allocatable[gpu.ResourceGPU] = q
	w.Status.Capacity[gpu.ResourceGPU] = q
	return w
}

// Clique sets the nvidia.com/gpu.clique label.
func (w *NodeWrapper) Clique(clique string) *NodeWrapper {
	w.Labels[gpu.LabelClique] = clique
	return w
}

// Label sets a label.
func (w *NodeWrapper) Label(key, value string) *NodeWrapper {
	w.Labels[key] = value
	return w
}

// Devices lists the node's GPUs in the gpusched.io/gpu-devices annotation and
// sets allocatable nvidia.com/gpu to match.
func (w *NodeWrapper) Devices(devices ...gpu.Device) *NodeWrapper {
	raw, err := json.Marshal(devices)
	if err != nil {
		panic(err)
	}
	w.Annotation(gpu.AnnotationDevices, string(raw))
	return w.AllocatableGPUs(len(devices))
}

// Annotation sets an annotation.
func (w *NodeWrapper) Annotation(key, value string) *NodeWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// CPU sets allocatable CPU.
func (w *NodeWrapper) CPU(q string) *NodeWrapper {
	w.Status.Allocatable[v1.ResourceCPU] = resource.MustParse(q)
	w.Status.Capacity[v1.ResourceCPU] = resource.MustParse(q)
	return w
}

// ResourceVersion sets the resourceVersion.
func (w *NodeWrapper) ResourceVersion(rv string) *NodeWrapper {
	w.Node.ResourceVersion = rv
	return w
}

// Obj returns the built node.
func (w *NodeWrapper) Obj() *v1.Node { return w.Node.DeepCopy() }

// PodWrapper builds a Pod.
type PodWrapper struct{ v1.Pod }

// MakeGPUPod starts a pod in namespace "default" with one container, "main",
// that asks for nothing, and a UID derived from its name.
func MakeGPUPod(name string) *PodWrapper {
	return &PodWrapper{v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "main",
			Image:     "registry.k8s.io/pause:3.10",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}},
		}}},
	}}
}

// Namespace sets the namespace.
func (w *PodWrapper) Namespace(ns string) *PodWrapper {
	w.Pod.Namespace = ns
	return w
}

// UID sets the UID.
func (w *PodWrapper) UID(uid string) *PodWrapper {
	w.Pod.UID = types.UID(uid)
	return w
}

// SchedulerName sets spec.schedulerName.
func (w *PodWrapper) SchedulerName(name string) *PodWrapper {
	w.Spec.SchedulerName = name
	return w
}

// GPUs asks for n whole GPUs (limit of nvidia.com/gpu on the first container).
func (w *PodWrapper) GPUs(n int) *PodWrapper {
	w.Spec.Containers[0].Resources.Limits[gpu.ResourceGPU] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	return w
}

// CPU requests CPU on the first container.
func (w *PodWrapper) CPU(q string) *PodWrapper {
	w.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(q)
	return w
}

// Milli asks for a share of one GPU.
func (w *PodWrapper) Milli(m int64) *PodWrapper {
	return w.Annotation(gpu.AnnotationMilli, strconv.FormatInt(m, 10))
}

// MilliResource asks for a share of one GPU through the quota-counted
// gpusched.io/gpu-milli resource (request and limit of the first container).
func (w *PodWrapper) MilliResource(m int64) *PodWrapper {
	return w.resource(gpu.ResourceMilli, m)
}

// MemoryResource asks for a share's GPU memory in MiB through the
// quota-counted gpusched.io/gpu-memory-mib resource.
func (w *PodWrapper) MemoryResource(mib int64) *PodWrapper {
	return w.resource(gpu.ResourceMemoryMiB, mib)
}

// resource sets an extended resource's request and limit (which Kubernetes
// requires equal) on the first container.
func (w *PodWrapper) resource(name v1.ResourceName, n int64) *PodWrapper {
	c := &w.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = v1.ResourceList{}
	}
	c.Resources.Limits[name] = *resource.NewQuantity(n, resource.DecimalSI)
	c.Resources.Requests[name] = *resource.NewQuantity(n, resource.DecimalSI)
	return w
}

// GPUMemory asks for GPU memory per GPU ("20480" MiB, or "20Gi").
func (w *PodWrapper) GPUMemory(v string) *PodWrapper {
	return w.Annotation(gpu.AnnotationMemory, v)
}

// Models restricts the GPU models, written as a JSON array.
func (w *PodWrapper) Models(models ...string) *PodWrapper {
	raw, err := json.Marshal(models)
	if err != nil {
		panic(err)
	}
	return w.Annotation(gpu.AnnotationModels, string(raw))
}

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// Label sets a label.
func (w *PodWrapper) Label(key, value string) *PodWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[key] = value
	return w
}

// Priority sets spec.priority.
func (w *PodWrapper) Priority(p int32) *PodWrapper {
	w.Spec.Priority = &p
	return w
}

// Node binds the pod to a node (spec.nodeName) and marks it Running.
func (w *PodWrapper) Node(name string) *PodWrapper {
	w.Spec.NodeName = name
	w.Status.Phase = v1.PodRunning
	return w
}

// Assigned writes the assignment annotation.
func (w *PodWrapper) Assigned(a gpu.Assignment) *PodWrapper {
	return w.Annotation(gpu.AnnotationAssigned, a.String())
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(p v1.PodPhase) *PodWrapper {
	w.Status.Phase = p
	return w
}

// Obj returns the built pod.
func (w *PodWrapper) Obj() *v1.Pod { return w.Pod.DeepCopy() }

// OwnedBy makes the pod's controller the object with uid (an
// ownerReference with controller=true), as a ReplicaSet's pods have.
func (w *PodWrapper) OwnedBy(kind, name, uid string) *PodWrapper {
	controller := true
	w.Pod.OwnerReferences = append(w.Pod.OwnerReferences, metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: &controller})
	return w
}
