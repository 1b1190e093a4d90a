package gputest

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// SliceWrapper builds a ResourceSlice shaped like those NVIDIA's DRA driver
// publishes: driver gpu.nvidia.com, one pool named after the node.
type SliceWrapper struct{ resourceapi.ResourceSlice }

// MakeNVIDIASlice starts slice name of node: driver gpu.nvidia.com, pool
// node at generation 1 with one slice, no devices.
func MakeNVIDIASlice(name, node string) *SliceWrapper {
	return &SliceWrapper{resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   gpu.DefaultDRADriver,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}}
}

// Driver sets the slice's driver.
func (w *SliceWrapper) Driver(driver string) *SliceWrapper {
	w.Spec.Driver = driver
	return w
}

// Pool sets the slice's pool, its generation and how many slices it has.
func (w *SliceWrapper) Pool(name string, generation, count int64) *SliceWrapper {
	w.Spec.Pool = resourceapi.ResourcePool{Name: name, Generation: generation, ResourceSliceCount: count}
	return w
}

// GPU adds a full GPU device "gpu-<minor>" as NVIDIA's driver publishes it:
// type, uuid, productName (NVML's, with spaces), architecture, PCI
// attributes and capacity memory in bytes. pcieRoot "" leaves the root out,
// as the driver does when it cannot resolve it.
func (w *SliceWrapper) GPU(minor int, uuid, product string, memoryMiB int64, pcieRoot string) *SliceWrapper {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                            {StringValue: ptr.To("gpu")},
		"uuid":                            {StringValue: ptr.To(uuid)},
		"productName":                     {StringValue: ptr.To(product)},
		"brand":                           {StringValue: ptr.To("Nvidia")},
		"architecture":                    {StringValue: ptr.To("Hopper")},
		"cudaComputeCapability":           {VersionValue: ptr.To("9.0.0")},
		"driverVersion":                   {VersionValue: ptr.To("580.95.5")},
		"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x18+minor))},
		"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(minor / 4))},
	}
	if pcieRoot != "" {
		attrs["resource.kubernetes.io/pcieRoot"] = resourceapi.DeviceAttribute{StringValue: ptr.To(pcieRoot)}
	}
	w.Spec.Devices = append(w.Spec.Devices, resourceapi.Device{
		Name:       fmt.Sprintf("gpu-%d", minor),
		Attributes: attrs,
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: mib(memoryMiB)}},
	})
	return w
}

// MIG adds a static MIG device of the GPU with parentUUID, named as
// NVIDIA's driver names it.
func (w *SliceWrapper) MIG(parentMinor int, parentUUID, profile string, placement int, memoryMiB int64) *SliceWrapper {
	w.Spec.Devices = append(w.Spec.Devices, resourceapi.Device{
		Name: fmt.Sprintf("gpu-%d-mig-%s-%d", parentMinor, profile, placement),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":        {StringValue: ptr.To("mig")},
			"parentUUID":  {StringValue: ptr.To(parentUUID)},
			"profile":     {StringValue: ptr.To(profile)},
			"uuid":        {StringValue: ptr.To(fmt.Sprintf("MIG-%s-%d", parentUUID, placement))},
			"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: mib(memoryMiB)}},
	})
	return w
}

// Shared lets every device so far be allocated to several claims, each
// consuming part of its memory (KEP-5075), as the driver's consumable
// shares publish them.
func (w *SliceWrapper) Shared() *SliceWrapper {
	for i := range w.Spec.Devices {
		d := &w.Spec.Devices[i]
		d.AllowMultipleAllocations = ptr.To(true)
		mem := d.Capacity["memory"]
		step := mib(1)
		mem.RequestPolicy = &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(resource.MustParse("0")),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(mem.Value.DeepCopy()), Step: &step},
		}
		d.Capacity["memory"] = mem
	}
	return w
}

// Attr sets attribute name of device dev (which must exist).
func (w *SliceWrapper) Attr(dev string, name resourceapi.QualifiedName, a resourceapi.DeviceAttribute) *SliceWrapper {
	d := w.device(dev)
	if d.Attributes == nil {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	}
	d.Attributes[name] = a
	return w
}

// Taint taints device dev.
func (w *SliceWrapper) Taint(dev, key, value string, effect resourceapi.DeviceTaintEffect) *SliceWrapper {
	d := w.device(dev)
	d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: key, Value: value, Effect: effect})
	return w
}

// Capacity sets capacity name of device dev.
func (w *SliceWrapper) Capacity(dev string, name resourceapi.QualifiedName, q string) *SliceWrapper {
	d := w.device(dev)
	d.Capacity[name] = resourceapi.DeviceCapacity{Value: resource.MustParse(q)}
	return w
}

func (w *SliceWrapper) device(name string) *resourceapi.Device {
	for i := range w.Spec.Devices {
		if w.Spec.Devices[i].Name == name {
			return &w.Spec.Devices[i]
		}
	}
	panic("gputest: slice " + w.Name + " has no device " + name)
}

// Obj returns a copy of the slice.
func (w *SliceWrapper) Obj() *resourceapi.ResourceSlice { return w.ResourceSlice.DeepCopy() }

func mib(n int64) resource.Quantity { return *resource.NewQuantity(n<<20, resource.BinarySI) }

// EmptyDRAView is a node's GPUs as a DRA driver publishes them, n GPUs of
// one model with 80 GiB each, with nothing allocated: the view GPUPlacement
// hands the other plugins (gpu.EmptyDRANodeGPUs).
func EmptyDRAView(node, model string, n int) *gpu.NodeGPUs {
	devices := make([]gpu.Device, n)
	for i := range devices {
		devices[i] = gpu.Device{Index: i, Model: model, MemoryMiB: 81920}
	}
	inv, err := gpu.NewInventory(devices)
	if err != nil {
		panic(err)
	}
	return gpu.EmptyDRANodeGPUs(node, &gpu.DRAInventory{Inventory: inv})
}
