package discovery

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Snapshot is the node's GPU inventory at one moment: the devices the engine
// sees (health marks applied), their annotation value, and what the node
// side needs beyond the engine's fields. A Snapshot is immutable.
type Snapshot struct {
	// Devices are as published in gpusched.io/gpu-devices.
	Devices []gpu.Device
	// Annotation is the gpusched.io/gpu-devices value for Devices.
	Annotation string
	// NUMANodes[i] is the host NUMA node of Devices[i] (-1 unknown); a MIG
	// device has its parent GPU's.
	NUMANodes []int
	// Minors[i] is the /dev/nvidia<minor> number of Devices[i] (-1 unknown);
	// a MIG device has its parent GPU's.
	Minors []int
	// Machine is the discovery the snapshot came from (nil for one built by
	// SnapshotOf).
	Machine *Machine

	byUUID map[string]int
}

// NewSnapshot builds the snapshot of a discovery, with health's marks.
func NewSnapshot(m *Machine, health *Health) (*Snapshot, error) {
	devices := m.Devices()
	numa := make([]int, 0, len(devices))
	minors := make([]int, 0, len(devices))
	for _, g := range m.GPUs {
		n := 1
		if g.MIGEnabled {
			n = len(g.MIG)
		}
		for range n {
			numa = append(numa, g.NUMANode)
			minors = append(minors, g.Minor)
		}
	}
	if health != nil {
		for i := range devices {
			devices[i].Unhealthy = health.Reason(devices[i].UUID)
		}
	}
	s, err := SnapshotOf(devices)
	if err != nil {
		return nil, err
	}
	s.NUMANodes, s.Minors, s.Machine = numa, minors, m
	return s, nil
}

// SnapshotOf builds a snapshot of devices alone (NUMA nodes unknown). The
// devices must be a valid inventory (see gpu.EncodeDevices) with distinct
// UUIDs.
func SnapshotOf(devices []gpu.Device) (*Snapshot, error) {
	annotation, err := gpu.EncodeDevices(devices)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Devices: devices, Annotation: annotation, byUUID: make(map[string]int, len(devices))}
	for i, d := range devices {
		if d.UUID == "" {
			continue
		}
		if j, dup := s.byUUID[d.UUID]; dup {
			return nil, fmt.Errorf("GPU UUID %s is listed at index %d and %d", d.UUID, devices[j].Index, d.Index)
		}
		s.byUUID[d.UUID] = i
	}
	s.NUMANodes = make([]int, len(devices))
	s.Minors = make([]int, len(devices))
	for i := range s.NUMANodes {
		s.NUMANodes[i], s.Minors[i] = -1, -1
	}
	return s, nil
}

// ByUUID returns the device with the given UUID.
func (s *Snapshot) ByUUID(uuid string) (gpu.Device, bool) {
	i, ok := s.byUUID[uuid]
	if !ok {
		return gpu.Device{}, false
	}
	return s.Devices[i], true
}

// Minor returns the /dev/nvidia<minor> number of the device with the given
// UUID, or -1 when it is unknown.
func (s *Snapshot) Minor(uuid string) int {
	i, ok := s.byUUID[uuid]
	if !ok || i >= len(s.Minors) {
		return -1
	}
	return s.Minors[i]
}

// ByIndex returns the device with the given index.
func (s *Snapshot) ByIndex(index int) (gpu.Device, bool) {
	if index >= 0 && index < len(s.Devices) && s.Devices[index].Index == index {
		return s.Devices[index], true
	}
	for _, d := range s.Devices {
		if d.Index == index {
			return d, true
		}
	}
	return gpu.Device{}, false
}

// Store holds the current snapshot for the agent's readers (the NRI plugin on
// every container creation, the device plugin) and tells subscribers when it
// changes. Reads take no lock.
type Store struct {
	current atomic.Pointer[Snapshot]
	mu      sync.Mutex
	subs    []chan struct{}
}

// Current is the latest snapshot, or nil before the first discovery.
func (s *Store) Current() *Snapshot { return s.current.Load() }

// Set replaces the snapshot and notifies subscribers.
func (s *Store) Set(snap *Snapshot) {
	s.current.Store(snap)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel that receives after each Set (coalesced: a
// reader that falls behind sees one notification and then reads Current),
// and a function that ends the subscription.
func (s *Store) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, c)
	return c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.subs = slices.DeleteFunc(s.subs, func(x chan struct{}) bool { return x == c })
	}
}
