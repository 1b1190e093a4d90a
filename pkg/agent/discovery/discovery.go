// Package discovery finds a node's GPUs through NVML, keeps the node's
// gpusched.io/gpu-devices annotation current, and marks GPUs unhealthy on
// critical XID events.
//
// It codes against go-nvml's nvml.Interface, so the same code runs on a real
// driver (nvml.New()) and on go-nvml's mock machines (see pkg/agent/nvmlmock).
//
// # From NVML to the engine's devices
//
// Every physical GPU with MIG disabled is one gpu.Device. A GPU with MIG
// enabled is replaced by one gpu.Device per MIG device (GPU instance with its
// compute instance), carrying the MIG UUID ("MIG-...") and the instance's own
// memory; the parent GPU itself is not listed, since no container can be
// given both the whole GPU and a slice of it. This follows what NVIDIA's
// device plugin does under its "mixed" and "single" MIG strategies: a MIG
// device is a unit of allocation. MIG devices have no NVLink peers (MIG does
// not expose NVLink to its instances), so their Group is "".
//
// # Stable identity
//
// A device's index is what assignments name, so it must not change while
// pods hold the device. NVML's index is a position: when a GPU falls off the
// bus (XID 79) and the driver reloads, the GPUs after it move down one. So a
// whole GPU's index is its minor number, the N of /dev/nvidia<N>, which the
// driver ties to the GPU's PCI slot (NVML's index when the minor is
// unknown; on a healthy node the two are equal). A MIG device's index is
// 1000 × (its parent's index + 1) + 10 × its GPU instance + its compute
// instance, e.g. 2090 for GPU instance 9, compute instance 0 on GPU 1, so a
// MIG change on one GPU renumbers nothing else. A GPU that NVML stops
// reporting is kept by the Publisher, unhealthy, at its index (see Lost).
package discovery

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	// UUID is NVML's "GPU-..." identifier.
	UUID string `json:"uuid"`
	// Index is NVML's index; Minor is the /dev/nvidia<minor> number (-1 unknown).
	Index int `json:"nvmlIndex"`
	Minor int `json:"minor"`
	// Name is NVML's product name; Model is Name the way GPU Feature Discovery
	// writes nvidia.com/gpu.product (runs of spaces become "-").
	Name  string `json:"name"`
	Model string `json:"model"`
	// MemoryMiB is the GPU's total framebuffer memory.
	MemoryMiB int64 `json:"memoryMiB"`
	// PCIBusID is e.g. "00000000:07:00.0"; NUMANode is the host NUMA node the
	// GPU hangs off (-1 unknown).
	PCIBusID string `json:"pciBusID"`
	NUMANode int    `json:"numaNode"`
	// MIGEnabled is the GPU's current MIG mode; MIG lists its MIG devices.
	MIGEnabled bool        `json:"migEnabled"`
	MIG        []MIGDevice `json:"mig,omitempty"`
	// Group is the GPU's interconnect group (see groups).
	Group string `json:"group,omitempty"`

	handle nvml.Device
}

// MIGDevice is one MIG device (a GPU instance and its compute instance).
type MIGDevice struct {
	UUID string `json:"uuid"`
	// GPUInstanceID and ComputeInstanceID identify it on its parent GPU.
	GPUInstanceID     int `json:"gpuInstance"`
	ComputeInstanceID int `json:"computeInstance"`
	// Profile is e.g. "1g.10gb"; Model is the parent's Model + "-MIG-" + Profile,
	// as GPU Feature Discovery names MIG products.
	Profile   string `json:"profile"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
}

// Machine is what one discovery found.
type Machine struct {
	GPUs []GPU
}

// Options tune Discover.
type Options struct {
	// Clique is the node's nvidia.com/gpu.clique label (set by GPU Feature
	// Discovery on multi-node NVLink systems), or "". When set, it names the
	// NVLink groups (see groups).
	Clique string
	// SysfsRoot is where /sys is mounted, for the NUMA node of a GPU whose
	// driver does not answer nvmlDeviceGetNumaNodeId; "" means "/sys".
	SysfsRoot string
}

// Discover lists the GPUs NVML sees. The caller has called lib.Init.
//
// A GPU whose UUID, name or memory cannot be read is left out, and the
// returned error names it; the Machine then still lists every GPU that could
// be read, so one lost GPU does not hide the others. A nil Machine comes only
// with an error that NVML could not be asked at all.
func Discover(lib nvml.Interface, opts Options) (*Machine, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %v", ret)
	}
	m := &Machine{}
	var errs []error
	for i := 0; i < count; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU at NVML index %d: nvmlDeviceGetHandleByIndex: %v", i, ret))
			continue
		}
		g, err := readGPU(h, i, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.GPUs = append(m.GPUs, g)
	}
	groups(m.GPUs, opts.Clique)
	return m, errors.Join(errs...)
}

func readGPU(h nvml.Device, i int, opts Options) (GPU, error) {
	fail := func(call string, ret nvml.Return) (GPU, error) {
		return GPU{}, fmt.Errorf("GPU at NVML index %d: %s: %v", i, call, ret)
	}
	g := GPU{Index: i, Minor: -1, NUMANode: -1, handle: h}
	var ret nvml.Return
	if g.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return fail("nvmlDeviceGetUUID", ret)
	}
	if idx, ret := h.GetIndex(); ret == nvml.SUCCESS {
		g.Index = idx
	}
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		g.Minor = minor
	}
	if g.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return fail("nvmlDeviceGetName", ret)
	}
	g.Model = ModelName(g.Name)
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("nvmlDeviceGetMemoryInfo", ret)
	}
	g.MemoryMiB = int64(mem.Total >> 20)
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = busID(pci)
	}
	g.NUMANode = numaNode(h, g.PCIBusID, opts.SysfsRoot)

	current, _, ret := h.GetMigMode()
	g.MIGEnabled = ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE
	if g.MIGEnabled {
		mig, err := readMIG(h, g)
		if err != nil {
			return GPU{}, fmt.Errorf("GPU %s at NVML index %d: %w", g.UUID, i, err)
		}
		g.MIG = mig
	}
	return g, nil
}

// readMIG lists the MIG devices of a MIG-enabled GPU.
func readMIG(h nvml.Device, parent GPU) ([]MIGDevice, error) {
	max, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetMaxMigDeviceCount: %v", ret)
	}
	var out []MIGDevice
	for j := 0; j < max; j++ {
		mh, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvmlDeviceGetMigDeviceHandleByIndex(%d): %v", j, ret)
		}
		d := MIGDevice{}
		if d.UUID, ret = mh.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: nvmlDeviceGetUUID: %v", j, ret)
		}
		if d.GPUInstanceID, ret = mh.GetGpuInstanceId(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %s: nvmlDeviceGetGpuInstanceId: %v", d.UUID, ret)
		}
		if d.ComputeInstanceID, ret = mh.GetComputeInstanceId(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %s: nvmlDeviceGetComputeInstanceId: %v", d.UUID, ret)
		}
		attrs, ret := mh.GetAttributes()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %s: nvmlDeviceGetAttributes: %v", d.UUID, ret)
		}
		d.MemoryMiB = int64(attrs.MemorySizeMB)
		d.Profile = migProfile(attrs.GpuInstanceSliceCount, attrs.MemorySizeMB, parent.MemoryMiB)
		d.Model = parent.Model + "-MIG-" + d.Profile
		out = append(out, d)
	}
	return out, nil
}

// ModelName turns an NVML product name into the form GPU Feature Discovery
// publishes as nvidia.com/gpu.product: "NVIDIA H100 80GB HBM3" becomes
// "NVIDIA-H100-80GB-HBM3".
func ModelName(name string) string { return strings.Join(strings.Fields(name), "-") }

// migProfile names a MIG profile the way nvidia-smi does, "<slices>g.<GB>gb".
// The GB figure is the instance's share of the GPU's memory rounded to
// eighths (the granularity of MIG memory slices) times the GPU's memory in
// GB, so an A100-40GB instance of 4864 MiB is "1g.5gb" and an 80 GB GPU's
// full instance of 80384 MiB is "7g.80gb".
func migProfile(slices uint32, memMiB uint64, gpuMiB int64) string {
	gb := int64(math.Ceil(float64(memMiB) / 1024))
	if gpuMiB > 0 {
		gpuGB := math.Round(float64(gpuMiB) / 1024)
		eighths := math.Max(1, math.Round(8*float64(memMiB)/float64(gpuMiB)))
		gb = int64(math.Round(eighths * gpuGB / 8))
	}
	return fmt.Sprintf("%dg.%dgb", slices, gb)
}

// busID reads NVML's PCI bus id string.
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() == 0 {
		return fmt.Sprintf("%08x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	return b.String()
}

// numaNode asks NVML, then sysfs (/sys/bus/pci/devices/<bus id>/numa_node,
// with NVML's 8-digit domain shortened to the kernel's 4), for the GPU's NUMA
// node; -1 when neither knows.
func numaNode(h nvml.Device, bus, sysfsRoot string) int {
	if n, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS && n >= 0 {
		return n
	}
	if bus == "" {
		return -1
	}
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	id := strings.ToLower(bus)
	if len(id) == len("00000000:07:00.0") {
		id = id[4:]
	}
	raw, err := os.ReadFile(filepath.Join(sysfsRoot, "bus", "pci", "devices", id, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Devices lists the machine's GPUs as the engine sees them (see the package
// comment): whole GPUs, and MIG devices in place of MIG-enabled GPUs, with
// stable indices.
func (m *Machine) Devices() []gpu.Device {
	var out []gpu.Device
	for _, g := range m.GPUs {
		if !g.MIGEnabled {
			out = append(out, gpu.Device{Index: g.StableIndex(), UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, Group: g.Group})
			continue
		}
		for _, d := range g.MIG {
			out = append(out, gpu.Device{Index: migIndex(g.StableIndex(), d), UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB})
		}
	}
	return out
}

// StableIndex is the GPU's index in the inventory: its minor number, or
// NVML's index when the minor is unknown.
func (g *GPU) StableIndex() int {
	if g.Minor >= 0 {
		return g.Minor
	}
	return g.Index
}

// migIndex is the index of MIG device d of the GPU with index parent.
func migIndex(parent int, d MIGDevice) int {
	return 1000*(parent+1) + 10*d.GPUInstanceID + d.ComputeInstanceID
}
