package gpu

import v1 "k8s.io/api/core/v1"

// Well-known names read and written by the engine.
const (
	// ResourceGPU is the extended resource through which NVIDIA's device
	// plugin advertises whole GPUs and pods request them.
	ResourceGPU v1.ResourceName = "nvidia.com/gpu"

	// LabelProduct, LabelMemory, LabelCount and LabelClique are set on nodes by
	// NVIDIA GPU Feature Discovery: the GPU model, its memory in MiB, the
	// number of GPUs, and the NVLink clique (interconnect group).
	LabelProduct = "nvidia.com/gpu.product"
	LabelMemory  = "nvidia.com/gpu.memory"
	LabelCount   = "nvidia.com/gpu.count"
	LabelClique  = "nvidia.com/gpu.clique"

	// ResourceMilli is the extended resource through which a pod may ask for
	// a share of one GPU, in milli-GPU (1..999), as AnnotationMilli asks for
	// it; unlike the annotation it is counted by ResourceQuota, LimitRange
	// and Kueue (docs/quotas.md). The two names are the same string: one is
	// a resource, the other an annotation.
	//
	// It is also the one share resource a node's kubelet may count itself:
	// the node agent advertises it (1000 per GPU), and the scheduler then
	// checks it against the node's allocatable as the kubelet will
	// (GPUResourcesFit, what-if).
	ResourceMilli v1.ResourceName = "gpusched.io/gpu-milli"
	// ResourceMemoryMiB is the extended resource through which a share asks
	// for GPU memory in MiB, as AnnotationMemory does; quota counts it.
	ResourceMemoryMiB v1.ResourceName = "gpusched.io/gpu-memory-mib"

	// AnnotationDevices on a Node lists its GPUs explicitly as JSON; it takes
	// precedence over the GFD labels (see InventoryFromNode).
	AnnotationDevices = "gpusched.io/gpu-devices"

	// AnnotationMilli on a Pod asks for a share of one GPU, in milli-GPU (1..999).
	AnnotationMilli = "gpusched.io/gpu-milli"
	// AnnotationMemory on a Pod asks for GPU memory per GPU: an integer number
	// of MiB or a quantity such as "20Gi".
	AnnotationMemory = "gpusched.io/gpu-memory"
	// AnnotationModels on a Pod lists the GPU models it may run on: a JSON
	// array of strings, or a comma-separated list.
	AnnotationModels = "gpusched.io/gpu-models"

	// AnnotationAssigned on a Pod records the GPUs it was given; it is written
	// before the pod is bound and read back to rebuild the ledger.
	AnnotationAssigned = "gpusched.io/gpu-assigned"
)

// MilliPerGPU is the capacity of one GPU in milli-GPU.
const MilliPerGPU = 1000

// MaxDevicesPerNode bounds the GPUs of one node, so that a set of devices fits
// in one machine word (see DeviceSet).
const MaxDevicesPerNode = 64
