package gpu

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Device is one GPU of a node.
type Device struct {
	// Index is the GPU's index on its node, as the device plugin numbers it.
	Index int `json:"index"`
	// UUID is the GPU's UUID ("GPU-..."), when known.
	UUID string `json:"uuid,omitempty"`
	// Model is the product name, e.g. "NVIDIA-A100-SXM4-80GB".
	Model string `json:"model"`
	// MemoryMiB is the GPU's memory; 0 means unknown.
	MemoryMiB int64 `json:"memoryMiB"`
	// Group names the interconnect group (NVLink island or clique) the GPU
	// belongs to. GPUs with the same Group talk to each other fast; "" is a
	// group of its own like any other name.
	Group string `json:"group,omitempty"`
	// Unhealthy, when set, says why the GPU must get no new pods (for
	// example "XID 79 at 2026-11-24T10:02:11Z"); pods already on it keep
	// their allocation. The node agent sets it from NVML's health events.
	Unhealthy string `json:"unhealthy,omitempty"`
}

// DeviceSet is a set of devices of one node, by position in Inventory.Devices.
type DeviceSet uint64

// Has reports whether position i is in the set.
func (s DeviceSet) Has(i int) bool { return s&(1<<uint(i)) != 0 }

// Len is the number of devices in the set.
func (s DeviceSet) Len() int { return popcount(uint64(s)) }

func popcount(x uint64) int {
	n := 0
	for x != 0 {
		x &= x - 1
		n++
	}
	return n
}

// Inventory is a node's GPUs. It is immutable once built.
type Inventory struct {
	// Devices in the order the source lists them (GFD: by index).
	Devices []Device
	// groups[g] is the set of devices in the g-th distinct interconnect group.
	groups []DeviceSet
	// all is the set of every device.
	all DeviceSet
	// memoryMiB is the sum of the devices' memory.
	memoryMiB int64
	// unhealthy is the set of devices marked Unhealthy.
	unhealthy DeviceSet
}

// NewInventory builds an inventory from a list of devices. It rejects more than
// MaxDevicesPerNode devices, negative or repeated indices and negative memory.
func NewInventory(devices []Device) (*Inventory, error) {
	if len(devices) > MaxDevicesPerNode {
		return nil, fmt.Errorf("%d GPUs on one node, at most %d are supported", len(devices), MaxDevicesPerNode)
	}
	inv := &Inventory{Devices: devices}
	seen := make(map[int]bool, len(devices))
	groupIndex := make(map[string]int, 2)
	for i, d := range devices {
		if d.Index < 0 || seen[d.Index] {
			return nil, fmt.Errorf("GPU index %d is negative or listed twice", d.Index)
		}
		seen[d.Index] = true
		if d.MemoryMiB < 0 {
			return nil, fmt.Errorf("GPU %d has negative memory %d MiB", d.Index, d.MemoryMiB)
		}
		g, ok := groupIndex[d.Group]
		if !ok {
			g = len(inv.groups)
			groupIndex[d.Group] = g
			inv.groups = append(inv.groups, 0)
		}
		inv.groups[g] |= 1 << uint(i)
		inv.all |= 1 << uint(i)
		if d.Unhealthy != "" {
			inv.unhealthy |= 1 << uint(i)
		}
		inv.memoryMiB += d.MemoryMiB
	}
	return inv, nil
}

// Len is the number of GPUs.
func (inv *Inventory) Len() int { return len(inv.Devices) }

// resolve returns the position of the k-th GPU of a, or -1 when the node
// does not have it. A GPU is known by its UUID when the assignment and the
// inventory both carry one, since an index is only a number the node gave
// it: a GPU renumbered since the assignment was written (another one lost,
// a MIG change) is found at its new index, and one the node no longer has
// is not counted, rather than charging whichever GPU has its old index
// now. conflict says what differs, or is "".
func (inv *Inventory) resolve(a *Assignment, k int) (pos int, conflict string) {
	index := a.Devices[k]
	pos = inv.position(index)
	if k >= len(a.UUIDs) || a.UUIDs[k] == "" {
		return pos, ""
	}
	uuid := a.UUIDs[k]
	if pos >= 0 && (inv.Devices[pos].UUID == uuid || inv.Devices[pos].UUID == "") {
		return pos, ""
	}
	for i := range inv.Devices {
		if inv.Devices[i].UUID == uuid {
			return i, fmt.Sprintf("GPU %s is assigned as index %d but is index %d on node %s now", uuid, index, inv.Devices[i].Index, a.Node)
		}
	}
	return -1, fmt.Sprintf("GPU %s (assigned as index %d) is not on node %s any more", uuid, index, a.Node)
}

// position returns the position of the device with the given index, or -1.
func (inv *Inventory) position(index int) int {
	if index >= 0 && index < len(inv.Devices) && inv.Devices[index].Index == index {
		return index // the common case: indices are 0..n-1 in order
	}
	for i := range inv.Devices {
		if inv.Devices[i].Index == index {
			return i
		}
	}
	return -1
}

// InventorySources are the node labels InventoryFromNode reads, besides the
// AnnotationDevices annotation and status.allocatable[ResourceGPU].
var InventorySources = []string{LabelProduct, LabelMemory, LabelCount, LabelClique}

// InventorySignature is everything a node's GPU inventory is read from
// (InventoryFromNode), as one string: nodes with equal signatures have
// equal inventories, and a node update that keeps its signature cannot have
// changed its GPUs.
func InventorySignature(node *v1.Node) string {
	q := node.Status.Allocatable[ResourceGPU]
	var b strings.Builder
	b.WriteString(node.Annotations[AnnotationDevices])
	b.WriteByte(0)
	b.WriteString(q.String())
	for _, key := range InventorySources {
		b.WriteByte(0)
		b.WriteString(node.Labels[key])
	}
	return b.String()
}

// InventoryFromNode reads a node's GPUs. Sources, in order of precedence:
//
//  1. the gpusched.io/gpu-devices annotation: a JSON list of Device objects;
//  2. GPU Feature Discovery labels: nvidia.com/gpu.product (model),
//     nvidia.com/gpu.memory (MiB), nvidia.com/gpu.clique (one interconnect
//     group for all GPUs), with the count from status.allocatable
//     ["nvidia.com/gpu"] or, when that is absent, nvidia.com/gpu.count.
//
// When both the annotation and the allocatable count are present they must
// agree: the count is every GPU listed, or every GPU not marked unhealthy (a
// device plugin withdraws unhealthy GPUs from allocatable). Any other count
// means a GPU was withdrawn that cannot be told apart from the others, so it
// is an error rather than a guess. A node with neither source has
// an empty inventory and a nil error.
func InventoryFromNode(node *v1.Node) (*Inventory, error) {
	allocatable, hasAllocatable := node.Status.Allocatable[ResourceGPU]
	if raw, ok := node.Annotations[AnnotationDevices]; ok {
		var devices []Device
		if err := json.Unmarshal([]byte(raw), &devices); err != nil {
			return nil, invalid(AnnotationDevices, raw,
				`want a JSON list of {"index":0,"uuid":"GPU-...","model":"...","memoryMiB":81920,"group":"...","unhealthy":"..."}: `+err.Error())
		}
		inv, err := NewInventory(devices)
		if err != nil {
			return nil, invalid(AnnotationDevices, raw, err.Error())
		}
		if n := allocatable.Value(); hasAllocatable && n != int64(len(devices)) && n != int64(len(devices)-inv.unhealthy.Len()) {
			return nil, invalid(AnnotationDevices, raw, fmt.Sprintf(
				"lists %d GPUs (%d healthy) but status.allocatable[%s] is %d; it must count every GPU listed, or the healthy ones",
				len(devices), len(devices)-inv.unhealthy.Len(), ResourceGPU, n))
		}
		return inv, nil
	}

	count := int64(0)
	switch {
	case hasAllocatable:
		count = allocatable.Value()
	case node.Labels[LabelCount] != "":
		n, err := strconv.ParseInt(node.Labels[LabelCount], 10, 64)
		if err != nil || n < 0 {
			return nil, invalid(LabelCount, node.Labels[LabelCount], "want a non-negative integer number of GPUs")
		}
		count = n
	}
	if count > MaxDevicesPerNode {
		return nil, invalid(string(ResourceGPU), strconv.FormatInt(count, 10),
			fmt.Sprintf("at most %d GPUs per node are supported", MaxDevicesPerNode))
	}
	var memory int64
	if raw := node.Labels[LabelMemory]; raw != "" {
		m, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || m < 0 {
			return nil, invalid(LabelMemory, raw, "want a non-negative integer number of MiB")
		}
		memory = m
	}
	devices := make([]Device, count)
	for i := range devices {
		devices[i] = Device{
			Index:     i,
			Model:     node.Labels[LabelProduct],
			MemoryMiB: memory,
			Group:     node.Labels[LabelClique],
		}
	}
	return NewInventory(devices)
}
