// Package nvmlmock turns go-nvml's mock DGX machines (pkg/nvml/mock/dgxa100,
// dgxh100) into machines the node agent can discover end to end, and lets a
// test or a demo change them while the agent runs: take a GPU off the bus,
// switch MIG on or off, raise an XID event.
//
// go-nvml's mocks answer the calls a device plugin makes (UUID, name, memory,
// MIG instance creation) but leave others unset, and an unset call panics. A
// Machine fills in what discovery asks for: the PCI bus id, the NUMA node
// (the first half of the GPUs on node 0, the rest on node 1, as on a DGX),
// NVLink peer status (every GPU of an island reaches every other), MIG device
// handles for the GPU instances a test creates, and an NVML event set fed
// from InjectXID.
//
// All of a Machine's methods are safe for concurrent use with the agent
// reading it.
package nvmlmock

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// Machine is a mock NVML machine. It implements nvml.Interface.
type Machine struct {
	*server.Server

	mu sync.Mutex
	// all are every GPU the machine was built with; Server.Devices holds the
	// ones still on the bus.
	all []*server.Device
	// island[i] is the NVLink island of the GPU built at position i; GPUs in
	// the same island are NVLink peers. -1: no NVLink.
	island []int
	// migHandles caches one handle per GPU instance, so a MIG device keeps its
	// UUID across discoveries.
	migHandles map[*server.GpuInstance]*mock.Device
	events     chan nvml.EventData
}

// DGXA100 is eight A100-SXM4-40GB GPUs, all NVLink peers through NVSwitch.
func DGXA100() *Machine { return New(dgxa100.New(), AllPeers) }

// DGXH100 is eight H100-SXM5-80GB GPUs, all NVLink peers through NVSwitch.
func DGXH100() *Machine { return New(dgxh100.New(), AllPeers) }

// AllPeers puts every GPU in one NVLink island.
func AllPeers(i int) int { return 0 }

// NoNVLink leaves every GPU without NVLink peers (PCIe cards).
func NoNVLink(i int) int { return -1 }

// Pairs makes NVLink bridges between GPUs 0-1, 2-3, ... .
func Pairs(i int) int { return i / 2 }

// New wraps a go-nvml mock server. island(i) names the NVLink island of the
// GPU at index i (-1 for none). The server's GPU UUIDs are replaced by
// deterministic ones ("GPU-00000000-0000-4000-8000-00000000000<i>"), so tests
// and demos can name them.
func New(s *server.Server, island func(i int) int) *Machine {
	m := &Machine{
		Server:     s,
		migHandles: map[*server.GpuInstance]*mock.Device{},
		events:     make(chan nvml.EventData, 64),
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = GPUUUID(i)
		m.all = append(m.all, dev)
		m.island = append(m.island, island(i))
	}
	for i, dev := range m.all {
		m.fillDevice(i, dev)
	}
	s.DeviceGetCountFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(s.Devices), nvml.SUCCESS
	}
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if i < 0 || i >= len(s.Devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.Devices[i], nvml.SUCCESS
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return m.newEventSet(), nvml.SUCCESS
	}
	return m
}

// GPUUUID is the UUID New gives the GPU built at index i.
func GPUUUID(i int) string { return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012x", i) }

// fillDevice sets the calls go-nvml's mock leaves unset on one GPU.
func (m *Machine) fillDevice(pos int, d *server.Device) {
	n := len(m.all)
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		p.PciDeviceId = d.Config.PciDeviceId
		p.Bus = uint32(pos)
		for i, c := range []byte(d.PciBusID) {
			if i >= len(p.BusId)-1 {
				break
			}
			p.BusId[i] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetIndexFunc = func() (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return d.Index, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if pos < (n+1)/2 {
			return 0, nvml.SUCCESS
		}
		return 1, nvml.SUCCESS
	}
	d.GetP2PStatusFunc = func(other nvml.Device, index nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		o, ok := other.(*server.Device)
		if !ok || index != nvml.P2P_CAPS_INDEX_NVLINK {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		peer := m.position(o)
		if peer < 0 || peer == pos || m.island[pos] < 0 || m.island[pos] != m.island[peer] {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		handles := m.migDevices(d)
		if j < 0 || j >= len(handles) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return handles[j], nvml.SUCCESS
	}
}

func (m *Machine) position(d *server.Device) int {
	for i, x := range m.all {
		if x == d {
			return i
		}
	}
	return -1
}

// migDevices returns a handle per GPU instance of d, by instance id.
func (m *Machine) migDevices(d *server.Device) []nvml.Device {
	d.RLock()
	gis := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		gis = append(gis, gi)
	}
	d.RUnlock()
	sort.Slice(gis, func(a, b int) bool { return gis[a].Info.Id < gis[b].Info.Id })

	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]nvml.Device, 0, len(gis))
	for _, gi := range gis {
		h, ok := m.migHandles[gi]
		if !ok {
			h = newMIGHandle(d, gi)
			m.migHandles[gi] = h
		}
		out = append(out, h)
	}
	return out
}

// newMIGHandle builds the MIG device of one GPU instance (one compute
// instance spanning it, as "nvidia-smi mig -cgi ... -C" creates).
func newMIGHandle(parent *server.Device, gi *server.GpuInstance) *mock.Device {
	profile := parent.Config.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)]
	id := "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s/%d", parent.UUID, gi.Info.Id)).String()
	h := &mock.Device{}
	h.GetUUIDFunc = func() (string, nvml.Return) { return id, nvml.SUCCESS }
	h.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	h.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	h.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(gi.Info.Id), nvml.SUCCESS }
	h.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	h.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       profile.MultiprocessorCount,
			GpuInstanceSliceCount:     profile.SliceCount,
			ComputeInstanceSliceCount: profile.SliceCount,
			MemorySizeMB:              profile.MemorySizeMB,
		}, nvml.SUCCESS
	}
	h.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: profile.MemorySizeMB << 20}, nvml.SUCCESS
	}
	return h
}

// RemoveGPU takes the GPU built at index i off the bus: NVML no longer lists
// it, and the GPUs after it move down one index, as after a real GPU loss
// and driver reload.
func (m *Machine) RemoveGPU(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	target := m.all[i]
	kept := m.Devices[:0:0]
	for _, d := range m.Devices {
		if d.(*server.Device) != target {
			kept = append(kept, d)
		}
	}
	for j, d := range kept {
		d.(*server.Device).Index = j
	}
	m.Devices = kept
}

// EnableMIG switches MIG on for the GPU built at index i and creates one GPU
// instance per profile id (nvml.GPU_INSTANCE_PROFILE_*).
func (m *Machine) EnableMIG(i int, profiles ...int) error {
	d := m.all[i]
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("enable MIG on GPU %d: %v", i, ret)
	}
	for _, p := range profiles {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU instance profile %d on GPU %d: %v", p, i, ret)
		}
		if _, ret := d.CreateGpuInstance(&info); ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance %d on GPU %d: %v", p, i, ret)
		}
	}
	return nil
}

// DisableMIG destroys the GPU instances of the GPU built at index i and
// switches MIG off.
func (m *Machine) DisableMIG(i int) error {
	d := m.all[i]
	d.RLock()
	gis := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		gis = append(gis, gi)
	}
	d.RUnlock()
	for _, gi := range gis {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("destroy GPU instance %d on GPU %d: %v", gi.Info.Id, i, ret)
		}
	}
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("disable MIG on GPU %d: %v", i, ret)
	}
	return nil
}

// InjectXID raises an XID critical-error event on the GPU built at index i.
// gpuInstance is the GPU instance id for an error inside one MIG instance,
// or 0xFFFFFFFF for the whole GPU.
func (m *Machine) InjectXID(i int, xid uint64, gpuInstance uint32) {
	m.events <- nvml.EventData{
		Device:            m.all[i],
		EventType:         nvml.EventTypeXidCriticalError,
		EventData:         xid,
		GpuInstanceId:     gpuInstance,
		ComputeInstanceId: 0xFFFFFFFF,
	}
}

// newEventSet returns an event set whose Wait delivers InjectXID's events.
func (m *Machine) newEventSet() nvml.EventSet {
	set := &mock.EventSet{}
	set.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-m.events:
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(timeoutMs) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return set
}
