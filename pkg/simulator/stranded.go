package simulator

import (
	"strconv"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// strandedIdle is strandedAt's key for the GPUs with nothing allocated.
const strandedIdle = "idle"

// strandedAt is where the unallocated GPU capacity sits: the free milli-GPU
// of every GPU, grouped by the largest share it holds ("810" for a GPU whose
// largest share is 810 milli-GPU), and under "idle" for GPUs that hold
// nothing. A GPU held by a whole-GPU pod has nothing free. It reads the
// tracker's node views, which hold every bound pod's assignment, and the
// scheduler's bound pods for their shares.
func strandedAt(frag *fragTracker, s *scheduler) map[string]int64 {
	type key struct {
		node   string
		device int
	}
	largest := map[key]int64{}
	for uid := range s.bound {
		a, ok := gpu.AssignmentOf(s.measured(uid))
		if !ok || a.Milli >= gpu.MilliPerGPU {
			continue
		}
		for _, d := range a.Devices {
			k := key{a.Node, d}
			largest[k] = max(largest[k], a.Milli)
		}
	}
	out := map[string]int64{}
	for name, tn := range frag.nodes {
		n := tn.view
		if n.Inventory == nil {
			continue
		}
		for i := range n.Used {
			free := n.FreeMilli(i)
			switch {
			case free == 0:
			case n.Used[i].Milli == 0:
				out[strandedIdle] += free
			default:
				share := largest[key{name, n.Inventory.Devices[i].Index}]
				out[strconv.FormatInt(share, 10)] += free
			}
		}
	}
	return out
}
