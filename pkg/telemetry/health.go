package telemetry

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Unhealthy reports whether g must not be given to pods, and why: an XID
// error within the health window, or a failed row remap.
func (g *GPU) Unhealthy(window time.Duration) (bool, string) {
	if v, ok := g.Get(XIDErrors); ok && v > 0 {
		return true, fmt.Sprintf("XID %g within %s", v, window)
	}
	if v, ok := g.Get(RowRemapFailure); ok && v > 0 {
		return true, "row remap failure"
	}
	return false, ""
}

// Health is the gpu.Excluder of a snapshot: it excludes the GPUs whose samples
// report them unhealthy. A nil Health (no fresh snapshot) excludes nothing:
// unknown health is not bad health.
type Health struct{ Snap *Snapshot }

var _ gpu.Excluder = (*Health)(nil)

// Excluded implements gpu.Excluder. Devices are matched to samples by UUID
// when the node publishes UUIDs, else by index (Node.Lookup).
func (h *Health) Excluded(node string, inv *gpu.Inventory) (gpu.DeviceSet, string) {
	if h == nil || h.Snap == nil {
		return 0, ""
	}
	n := h.Snap.Node(node)
	if n == nil {
		return 0, ""
	}
	window := h.Snap.HealthWindow
	var set gpu.DeviceSet
	var why []string
	for i := range inv.Devices {
		d := &inv.Devices[i]
		g := n.Lookup(d.UUID, d.Index)
		if g == nil {
			continue
		}
		if bad, reason := g.Unhealthy(window); bad {
			set |= 1 << uint(i)
			why = append(why, fmt.Sprintf("GPU %d: %s", d.Index, reason))
		}
	}
	if set == 0 {
		return 0, ""
	}
	return set, "unhealthy GPUs excluded (" + strings.Join(why, "; ") + ")"
}

// UnhealthyCount is the number of the node's GPUs the snapshot reports
// unhealthy, and their reasons; it matches samples to no inventory, so it
// counts every GPU of the node the telemetry knows.
func (h *Health) UnhealthyCount(node string) (int, string) {
	if h == nil || h.Snap == nil {
		return 0, ""
	}
	n := h.Snap.Node(node)
	if n == nil {
		return 0, ""
	}
	window := h.Snap.HealthWindow
	count := 0
	var why []string
	for i := range n.GPUs {
		if bad, reason := n.GPUs[i].Unhealthy(window); bad {
			count++
			why = append(why, fmt.Sprintf("GPU %s: %s", gpuName(&n.GPUs[i]), reason))
		}
	}
	return count, strings.Join(why, "; ")
}

func gpuName(g *GPU) string {
	if g.Index >= 0 {
		return fmt.Sprint(g.Index)
	}
	return g.UUID
}
