package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// DefaultDRADriver is the DRA driver whose devices are GPUs by default:
// NVIDIA's (kubernetes-sigs/dra-driver-nvidia-gpu).
const DefaultDRADriver = "gpu.nvidia.com"

// DefaultDRAGroupAttributes are the device attributes read, in order, as a
// GPU's interconnect group (Device.Group): the PCIe root the driver
// publishes for every device whose root it can resolve.
var DefaultDRAGroupAttributes = []resourceapi.QualifiedName{"resource.kubernetes.io/pcieRoot"}

// Device attributes and capacities that InventoryFromSlices reads. A name
// without a domain is in the driver's domain: "uuid" is also found as
// "gpu.nvidia.com/uuid".
const (
	draAttrType       resourceapi.QualifiedName = "type"
	draAttrUUID       resourceapi.QualifiedName = "uuid"
	draAttrProduct    resourceapi.QualifiedName = "productName"
	draAttrParentUUID resourceapi.QualifiedName = "parentUUID"
	draCapMemory      resourceapi.QualifiedName = DRACapacityMemory
)

// DRACapacityMemory is the device capacity that holds a GPU's memory, in
// bytes; a request for part of it shares the GPU (consumable capacity).
const DRACapacityMemory resourceapi.QualifiedName = "memory"

// Values of the "type" attribute: a whole GPU, or a partition of one (MIG,
// static or dynamic). A device without the attribute is a whole GPU.
const (
	draTypeGPU    = "gpu"
	draTypeMIG    = "mig"
	draTypeMIGDyn = "migdyn"
)

// DRASource selects the devices of ResourceSlices that are GPUs.
type DRASource struct {
	// Driver is the DRA driver name (ResourceSlice spec.driver).
	Driver string
	// GroupAttributes are read in order; the first one a device has is its
	// interconnect group. Empty: DefaultDRAGroupAttributes.
	GroupAttributes []resourceapi.QualifiedName
}

// DRADeviceID names one DRA device: what an allocation result names
// (driver, pool, device), as structured.DeviceID does.
type DRADeviceID struct{ Driver, Pool, Device string }

// String is "driver/pool/device".
func (id DRADeviceID) String() string { return id.Driver + "/" + id.Pool + "/" + id.Device }

// SliceProblem is one device attribute, capacity or pool that
// InventoryFromSlices could not use: it skipped it and read the rest.
type SliceProblem struct {
	// Slice is the ResourceSlice's name.
	Slice string
	// Field is the path of what was skipped, e.g. "spec.devices[gpu-3].attributes[uuid]".
	Field string
	// Reason says what is wrong and what is allowed.
	Reason string
}

func (p SliceProblem) String() string { return p.Slice + ": " + p.Field + ": " + p.Reason }

// draPartition is a device that is part of a GPU (a MIG device): its
// allocation takes part of its parent.
type draPartition struct {
	parent    int // position of the parent GPU in the inventory
	memoryMiB int64
}

// DRAInventory is a node's GPUs as a DRA driver publishes them: an
// Inventory whose positions follow the allocator's device order (pools by
// name, slices by name, devices in slice order), and the DRA device behind
// each position. Immutable once built.
type DRAInventory struct {
	// Inventory is the node's whole GPUs. Device.Index is the position.
	Inventory *Inventory
	// IDs names the DRA device of each inventory position.
	IDs []DRADeviceID
	// partitions maps a partition device (MIG) to its parent GPU.
	partitions map[DRADeviceID]draPartition
	// positions maps a whole GPU's DRA device to its position.
	positions map[DRADeviceID]int
}

// Position is the inventory position of a DRA device: the GPU itself, or
// the parent GPU of a partition (partition is then true). ok is false for a
// device that is not in the inventory.
func (d *DRAInventory) Position(id DRADeviceID) (pos int, partition bool, ok bool) {
	if i, found := d.positions[id]; found {
		return i, false, true
	}
	if p, found := d.partitions[id]; found {
		return p.parent, true, true
	}
	return 0, false, false
}

// InventoryFromSlices reads a node's GPUs from ResourceSlices: those with
// spec.nodeName equal to node and spec.driver equal to src.Driver, of each
// pool only the newest generation, and only pools whose generation is
// complete (the allocator uses no other). Each device of type "gpu" (or with
// no type) becomes a Device: UUID from attribute uuid, Model from
// productName with spaces as '-' (as GPU Feature Discovery writes it),
// MemoryMiB from capacity memory, Group from the first of
// src.GroupAttributes the device has, Unhealthy from a NoSchedule or
// NoExecute taint. Devices of type "mig" or "migdyn" are folded onto their
// parent GPU (attribute parentUUID): an allocation of one takes part of the
// parent. At most MaxDevicesPerNode GPUs are read.
//
// What cannot be read (a wrong kind of value, an unknown type, an
// incomplete pool, a partition without its parent, a GPU beyond the limit)
// is skipped and reported as a SliceProblem; the rest is read. The result
// is nil when the node publishes no slice of the driver.
func InventoryFromSlices(node string, resourceSlices []*resourceapi.ResourceSlice, src DRASource) (*DRAInventory, []SliceProblem) {
	if len(src.GroupAttributes) == 0 {
		src.GroupAttributes = DefaultDRAGroupAttributes
	}
	pools := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range resourceSlices {
		if s.Spec.Driver == src.Driver && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			pools[s.Spec.Pool.Name] = append(pools[s.Spec.Pool.Name], s)
		}
	}
	if len(pools) == 0 {
		return nil, nil
	}
	r := &sliceReader{src: src, out: &DRAInventory{partitions: map[DRADeviceID]draPartition{}, positions: map[DRADeviceID]int{}}}
	for _, name := range sortedKeys(pools) {
		for _, s := range r.newestComplete(pools[name]) {
			for i := range s.Spec.Devices {
				r.device(s, &s.Spec.Devices[i])
			}
		}
	}
	r.resolvePartitions()
	inv, err := NewInventory(r.devices)
	if err != nil { // not reached: positions are the indices and memory is checked
		r.problem("", "spec.devices", err.Error())
		inv, _ = NewInventory(nil)
	}
	r.out.Inventory = inv
	return r.out, r.problems
}

// sliceReader accumulates one node's devices and problems.
type sliceReader struct {
	src      DRASource
	out      *DRAInventory
	devices  []Device
	problems []SliceProblem
	// pending are partitions whose parent may come later in device order.
	pending []pendingPartition
}

type pendingPartition struct {
	slice, field, parentUUID string
	id                       DRADeviceID
	memoryMiB                int64
}

func (r *sliceReader) problem(slice, field, reason string) {
	r.problems = append(r.problems, SliceProblem{Slice: slice, Field: field, Reason: reason})
}

// newestComplete returns the slices of a pool's newest generation, sorted
// by name, or none (with a problem) when that generation is incomplete.
func (r *sliceReader) newestComplete(pool []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	newest := pool[0].Spec.Pool.Generation
	for _, s := range pool {
		newest = max(newest, s.Spec.Pool.Generation)
	}
	var out []*resourceapi.ResourceSlice
	for _, s := range pool {
		if s.Spec.Pool.Generation == newest {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	if want := out[0].Spec.Pool.ResourceSliceCount; int64(len(out)) != want {
		r.problem(out[0].Name, "spec.pool.resourceSliceCount", fmt.Sprintf(
			"pool %q generation %d has %d of %d slices; its devices are skipped until the pool is complete",
			out[0].Spec.Pool.Name, newest, len(out), want))
		return nil
	}
	return out
}

// device reads one device of slice s.
func (r *sliceReader) device(s *resourceapi.ResourceSlice, dev *resourceapi.Device) {
	field := "spec.devices[" + dev.Name + "]"
	id := DRADeviceID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: dev.Name}
	typ, ok := r.stringAttr(s.Name, field, dev, draAttrType)
	if !ok {
		return
	}
	memory := r.memoryMiB(s.Name, field, dev)
	switch typ {
	case "", draTypeGPU:
	case draTypeMIG, draTypeMIGDyn:
		parent, _ := r.stringAttr(s.Name, field, dev, draAttrParentUUID)
		r.pending = append(r.pending, pendingPartition{slice: s.Name, field: field, parentUUID: parent, id: id, memoryMiB: memory})
		return
	default:
		r.problem(s.Name, field+".attributes[type]", fmt.Sprintf("unknown device type %q; want %q, %q or %q", typ, draTypeGPU, draTypeMIG, draTypeMIGDyn))
		return
	}
	if len(r.devices) == MaxDevicesPerNode {
		r.problem(s.Name, field, fmt.Sprintf("more than %d GPUs on one node; this one is skipped", MaxDevicesPerNode))
		return
	}
	d := Device{Index: len(r.devices), MemoryMiB: memory}
	d.UUID, _ = r.stringAttr(s.Name, field, dev, draAttrUUID)
	if d.UUID != "" {
		for _, other := range r.devices {
			if other.UUID == d.UUID {
				r.problem(s.Name, field+".attributes[uuid]", fmt.Sprintf("UUID %q is published twice; this device is skipped", d.UUID))
				return
			}
		}
	}
	product, _ := r.stringAttr(s.Name, field, dev, draAttrProduct)
	d.Model = strings.ReplaceAll(strings.TrimSpace(product), " ", "-")
	d.Group = r.group(s.Name, field, dev)
	d.Unhealthy = unhealthyFromTaints(dev.Taints)
	r.out.positions[id] = len(r.devices)
	r.out.IDs = append(r.out.IDs, id)
	r.devices = append(r.devices, d)
}

// resolvePartitions folds each partition onto its parent GPU.
func (r *sliceReader) resolvePartitions() {
	for _, p := range r.pending {
		parent := -1
		for i := range r.devices {
			if p.parentUUID != "" && r.devices[i].UUID == p.parentUUID {
				parent = i
				break
			}
		}
		if parent < 0 {
			r.problem(p.slice, p.field+".attributes[parentUUID]", fmt.Sprintf("parent GPU %q is not published by this node; the partition is skipped", p.parentUUID))
			continue
		}
		r.out.partitions[p.id] = draPartition{parent: parent, memoryMiB: p.memoryMiB}
	}
}

// attr looks an attribute up by its name and by the name in the driver's domain.
func (r *sliceReader) attr(dev *resourceapi.Device, name resourceapi.QualifiedName) (resourceapi.DeviceAttribute, bool) {
	if a, ok := dev.Attributes[name]; ok {
		return a, true
	}
	a, ok := dev.Attributes[resourceapi.QualifiedName(r.src.Driver+"/"+string(name))]
	return a, ok
}

// stringAttr reads a string attribute; "" when absent. ok is false (with
// a problem) when the attribute holds another kind of value.
func (r *sliceReader) stringAttr(slice, field string, dev *resourceapi.Device, name resourceapi.QualifiedName) (string, bool) {
	a, found := r.attr(dev, name)
	if !found {
		return "", true
	}
	if a.StringValue == nil {
		r.problem(slice, field+".attributes["+string(name)+"]", "want a string value, got "+attrKind(a))
		return "", false
	}
	return *a.StringValue, true
}

// group is the first of the group attributes the device has, as a string.
func (r *sliceReader) group(slice, field string, dev *resourceapi.Device) string {
	for _, name := range r.src.GroupAttributes {
		a, found := r.attr(dev, name)
		switch {
		case !found:
			continue
		case a.StringValue != nil:
			return *a.StringValue
		case a.IntValue != nil:
			return strconv.FormatInt(*a.IntValue, 10)
		default:
			r.problem(slice, field+".attributes["+string(name)+"]", "want a string or int value for an interconnect group, got "+attrKind(a))
		}
	}
	return ""
}

// memoryMiB reads capacity memory (a quantity of bytes) in MiB, rounded
// down; 0 (unknown) when absent or negative.
func (r *sliceReader) memoryMiB(slice, field string, dev *resourceapi.Device) int64 {
	c, found := dev.Capacity[draCapMemory]
	if !found {
		c, found = dev.Capacity[resourceapi.QualifiedName(r.src.Driver+"/"+string(draCapMemory))]
	}
	if !found {
		return 0
	}
	if c.Value.Sign() < 0 {
		r.problem(slice, field+".capacity[memory]", fmt.Sprintf("negative memory %s; want bytes, e.g. 81559Mi", c.Value.String()))
		return 0
	}
	return c.Value.Value() >> 20
}

func attrKind(a resourceapi.DeviceAttribute) string {
	switch {
	case a.IntValue != nil:
		return "int " + strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return "bool " + strconv.FormatBool(*a.BoolValue)
	case a.StringValue != nil:
		return "string " + strconv.Quote(*a.StringValue)
	case a.VersionValue != nil:
		return "version " + *a.VersionValue
	}
	return "no value"
}

// unhealthyFromTaints is the first taint that keeps new allocations off
// the device, as "key=value:Effect"; "" when there is none.
func unhealthyFromTaints(taints []resourceapi.DeviceTaint) string {
	for _, t := range taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return t.Key + "=" + t.Value + ":" + string(t.Effect)
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
