package simulator

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The DRA path: the same cluster and pods, with every GPU a device of
// NVIDIA's DRA driver instead of a device-plugin GPU, and every GPU request
// a ResourceClaim. The in-tree DynamicResources plugin then chooses the
// devices (first fit, as in a cluster), and GPUPlacement only ranks the
// nodes, on the devices it predicts DRA will take.
//
// A trace share is a share of compute (milli-GPU); DRA shares a device by
// consumable capacity (KEP-5075). Each GPU publishes draMiBPerMilli × 1000
// MiB of memory, and a share of m milli-GPU claims m × draMiBPerMilli MiB of
// it, so the engine reads the allocation back as exactly m milli-GPU; a
// whole GPU claims all of it.
const (
	// draMiBPerMilli is the memory, in MiB, of one milli-GPU of a device.
	draMiBPerMilli = 16
	// draClass is the DeviceClass of the claims: NVIDIA's.
	draClass = gpu.DefaultDRADriver
	// draRequest names the single request of a pod's claim.
	draRequest = "gpu"
)

// draNodes turns trace nodes into DRA nodes: the Node objects without GPU
// Feature Discovery labels and without allocatable nvidia.com/gpu, and one
// ResourceSlice per node with GPUs, shaped like NVIDIA's driver's (one pool
// named after the node; devices gpu-0, gpu-1, ... in index order, so that
// the engine's device positions are the trace node's GPU indices).
func draNodes(nodes []*v1.Node) ([]*v1.Node, []*resourceapi.ResourceSlice) {
	out := make([]*v1.Node, len(nodes))
	var slices []*resourceapi.ResourceSlice
	for i, n := range nodes {
		count, _ := strconv.Atoi(n.Labels[gpu.LabelCount])
		model := n.Labels[gpu.LabelProduct]
		dn := n.DeepCopy()
		delete(dn.Labels, gpu.LabelCount)
		delete(dn.Labels, gpu.LabelProduct)
		delete(dn.Status.Allocatable, gpu.ResourceGPU)
		delete(dn.Status.Capacity, gpu.ResourceGPU)
		out[i] = dn
		if count > 0 {
			slices = append(slices, draSlice(n.Name, count, model))
		}
	}
	return out, slices
}

// describesDevices reports whether a node describes its GPUs one by one
// (the gpusched.io/gpu-devices annotation: models, memory, health per
// device), which draNodes does not carry into the node's slice.
func describesDevices(nodes []*v1.Node) bool {
	for _, n := range nodes {
		if _, ok := n.Annotations[gpu.AnnotationDevices]; ok {
			return true
		}
	}
	return false
}

// draSlice publishes count GPUs of model on node, each shareable by
// consumable memory.
func draSlice(node string, count int, model string) *resourceapi.ResourceSlice {
	memory := resource.MustParse(fmt.Sprintf("%dMi", draMiBPerMilli*gpu.MilliPerGPU))
	step := resource.MustParse(fmt.Sprintf("%dMi", draMiBPerMilli))
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + gpu.DefaultDRADriver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   gpu.DefaultDRADriver,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range count {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":        {StringValue: ptr.To("gpu")},
				"uuid":        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
				"productName": {StringValue: ptr.To(model)},
			},
			AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {
				Value: memory,
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(memory.DeepCopy()),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(step.DeepCopy()), Max: ptr.To(memory.DeepCopy()), Step: ptr.To(step.DeepCopy())},
				},
			}},
		})
	}
	return s
}

// draDeviceClass is the class every claim names: the driver's GPUs.
func draDeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", gpu.DefaultDRADriver, gpu.DefaultDRADriver)}}}},
	}
}

// draPod is a trace pod with its GPU request as a ResourceClaim: the pod
// without the request (no nvidia.com/gpu, no gpusched.io annotations for
// GPUs) and referencing the claim, and the claim (named after the pod).
// Whole GPUs claim count devices with all their memory; a share claims its
// memory of one device; allowed models become a CEL selector on
// productName. A pod without GPUs is returned as it is, with no claim.
func draPod(pod *v1.Pod) (*v1.Pod, *resourceapi.ResourceClaim, error) {
	d, err := gpu.DemandFromPod(pod)
	if err != nil {
		return nil, nil, err
	}
	if d.IsZero() {
		return pod, nil, nil
	}
	p := pod.DeepCopy()
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		for _, name := range gpu.DemandResources {
			delete(c.Resources.Requests, name)
			delete(c.Resources.Limits, name)
		}
		c.Resources.Claims = []v1.ResourceClaim{{Name: draRequest}}
	}
	for _, key := range gpu.DemandAnnotations {
		delete(p.Annotations, key)
	}
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: draRequest, ResourceClaimName: ptr.To(pod.Name)}}

	milli := d.Milli
	if !d.IsShare() {
		milli = gpu.MilliPerGPU
	}
	req := &resourceapi.ExactDeviceRequest{
		DeviceClassName: draClass,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           int64(d.Count),
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(fmt.Sprintf("%dMi", milli*draMiBPerMilli)),
		}},
	}
	if len(d.Models) > 0 {
		quoted := make([]string, len(d.Models))
		for i, m := range d.Models {
			quoted[i] = strconv.Quote(m)
		}
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
			"device.attributes['%s'].productName in [%s]", gpu.DefaultDRADriver, strings.Join(quoted, ", "))}}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: types.UID(string(pod.UID) + "-claim")},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: draRequest, Exactly: req}}}},
	}
	return p, claim, nil
}

// draAssignment is the GPUs an allocation gives, as the assignment
// GPUPlacement would have written: device indices (the trace node's GPU
// indices) and milli-GPU per device, from the memory each result consumes.
func draAssignment(alloc *resourceapi.AllocationResult) (gpu.Assignment, error) {
	var a gpu.Assignment
	for _, r := range alloc.Devices.Results {
		idx, err := strconv.Atoi(strings.TrimPrefix(r.Device, "gpu-"))
		if err != nil || !strings.HasPrefix(r.Device, "gpu-") {
			return gpu.Assignment{}, fmt.Errorf("allocation result names device %q, want gpu-<index>", r.Device)
		}
		milli := int64(gpu.MilliPerGPU)
		if q, ok := r.ConsumedCapacity["memory"]; ok {
			milli = (q.Value() >> 20) / draMiBPerMilli
		}
		if a.Milli != 0 && a.Milli != milli {
			return gpu.Assignment{}, fmt.Errorf("allocation takes %d and %d milli-GPU of its devices; an assignment takes the same of each", a.Milli, milli)
		}
		a.Milli = milli
		a.Devices = append(a.Devices, idx)
	}
	return a, nil
}
