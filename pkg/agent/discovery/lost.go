package discovery

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Lost remembers the devices that NVML stopped reporting while their GPU
// did not come back, so that the inventory keeps them, unhealthy, at their
// index: pods placed on a lost GPU still hold it in the scheduler's ledger,
// no new pod is placed on it, and no other GPU takes its index. A device
// whose GPU is still reported (a MIG reconfiguration) is not lost: it is
// gone. A lost GPU that NVML reports again is no longer lost. The memory
// lasts as long as the agent: NVIDIA's remedy for a lost GPU is a reset or
// a reboot, after which the agent starts afresh.
type Lost struct {
	devices map[string]lostDevice // by UUID
}

type lostDevice struct {
	dev         gpu.Device
	numa, minor int
}

// Keep returns next with the devices of prev that are lost (see Lost)
// added, sorted by index, each marked unhealthy since now. A lost device
// whose index a reported device now has is dropped.
func (l *Lost) Keep(prev, next *Snapshot, now time.Time) (*Snapshot, error) {
	if l.devices == nil {
		l.devices = map[string]lostDevice{}
	}
	reported := map[string]bool{} // physical GPUs NVML reports now
	if next.Machine != nil {
		for _, g := range next.Machine.GPUs {
			reported[g.UUID] = true
		}
	}
	for uuid, ld := range l.devices {
		if _, ok := next.ByUUID(uuid); ok || reported[ld.dev.UUID] {
			delete(l.devices, uuid) // back
		}
	}
	if prev != nil && prev.Machine != nil {
		for i, d := range prev.Devices {
			if _, ok := next.ByUUID(d.UUID); ok || d.UUID == "" {
				continue
			}
			if parent := prev.Machine.parentOf(d.UUID); parent == "" || reported[parent] {
				continue // a MIG reconfiguration, or not a device of the machine
			}
			if _, known := l.devices[d.UUID]; known {
				continue
			}
			d.Unhealthy = "lost: not reported by NVML since " + now.UTC().Format(time.RFC3339)
			l.devices[d.UUID] = lostDevice{dev: d, numa: prev.NUMANodes[i], minor: prev.Minors[i]}
		}
	}
	if len(l.devices) == 0 {
		return next, nil
	}
	devices := slices.Clone(next.Devices)
	numa, minors := slices.Clone(next.NUMANodes), slices.Clone(next.Minors)
	for _, uuid := range sortedLost(l.devices) {
		ld := l.devices[uuid]
		if _, taken := next.ByIndex(ld.dev.Index); taken {
			delete(l.devices, uuid)
			continue
		}
		devices = append(devices, ld.dev)
		numa, minors = append(numa, ld.numa), append(minors, ld.minor)
	}
	order := make([]int, len(devices))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return devices[a].Index - devices[b].Index })
	sorted := make([]gpu.Device, len(devices))
	sortedNUMA, sortedMinors := make([]int, len(devices)), make([]int, len(devices))
	for to, from := range order {
		sorted[to], sortedNUMA[to], sortedMinors[to] = devices[from], numa[from], minors[from]
	}
	s, err := SnapshotOf(sorted)
	if err != nil {
		return nil, fmt.Errorf("keeping lost GPUs: %w", err)
	}
	s.NUMANodes, s.Minors, s.Machine = sortedNUMA, sortedMinors, next.Machine
	return s, nil
}

func sortedLost(m map[string]lostDevice) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// parentOf returns the UUID of the physical GPU a device belongs to (its
// own for a whole GPU, its parent's for a MIG device), or "".
func (m *Machine) parentOf(uuid string) string {
	for _, g := range m.GPUs {
		if g.UUID == uuid {
			return g.UUID
		}
		for _, d := range g.MIG {
			if d.UUID == uuid {
				return g.UUID
			}
		}
	}
	return ""
}
