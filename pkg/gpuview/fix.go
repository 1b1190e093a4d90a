package gpuview

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// fix finds the nearest way the demand would fit node i, whose reasons
// freeing can cure: for a share, the one GPU whose holders to go are the
// fewest of the lowest priority; for whole GPUs, the busy suitable GPUs
// whose holders are. host is what the node lacks beside its GPUs, reported
// with the fix. It returns nil when no freeing of GPUs would do.
func (s *Snapshot) fix(i int, d *gpu.Demand, host []string) *Fix {
	node, view := &s.Nodes[i], s.views[i]
	var f *Fix
	if d.IsShare() {
		f = shareFix(node, view, d)
	} else {
		f = wholeFix(node, view, d)
	}
	if f == nil {
		if len(host) == 0 {
			return nil
		}
		f = &Fix{Node: node.Name} // the GPUs fit; only the host is short
	}
	f.HostShort = host
	f.Text = f.describe()
	return f
}

// shareFix picks the GPU where freeing the fewest lowest-priority holders
// gives the share its milli-GPU and memory.
func shareFix(node *Node, view *gpu.NodeGPUs, d *gpu.Demand) *Fix {
	var best *Fix
	for g := range view.Len() {
		r := gpu.DeviceReason(view, d, g)
		if r == 0 {
			return nil // a GPU takes it now; the node is short of something else
		}
		if gpu.Reasons(r).Unresolvable() {
			continue
		}
		dev := &node.GPUs[g]
		needMilli := max(0, d.Milli-dev.FreeMilli())
		needMemory := max(0, d.MemoryMiB-dev.FreeMemoryMiB())
		holders := byCost(dev.Holders)
		var freedMilli, freedMemory int64
		var going []Holder
		for _, h := range holders {
			if freedMilli >= needMilli && freedMemory >= needMemory {
				break
			}
			going = append(going, h)
			freedMilli += h.Milli
			freedMemory += heldMemory(dev, h)
		}
		if freedMilli < needMilli || freedMemory < needMemory {
			continue
		}
		f := &Fix{Node: node.Name, GPUs: []int{dev.Index}, FreeMilli: needMilli, FreeMemoryMiB: needMemory,
			Holders: going, cost: costOf(going)}
		if best == nil || f.cost.compare(best.cost) < 0 {
			best = f
		}
	}
	return best
}

// wholeFix picks, beside the node's free suitable GPUs, the busy ones
// whose holders cost least to free, until the demand's count is met.
func wholeFix(node *Node, view *gpu.NodeGPUs, d *gpu.Demand) *Fix {
	var free []int
	type busy struct {
		pos     int
		holders []Holder
		cost    fixCost
	}
	var busyGPUs []busy
	for g := range view.Len() {
		switch r := gpu.DeviceReason(view, d, g); {
		case r == 0:
			free = append(free, g)
		case !gpu.Reasons(r).Unresolvable():
			h := node.GPUs[g].Holders
			busyGPUs = append(busyGPUs, busy{g, h, costOf(h)})
		}
	}
	need := d.Count - len(free)
	if need <= 0 || need > len(busyGPUs) {
		return nil
	}
	slices.SortStableFunc(busyGPUs, func(a, b busy) int { return a.cost.compare(b.cost) })
	f := &Fix{Node: node.Name}
	seen := map[string]bool{}
	for _, b := range busyGPUs[:need] {
		f.GPUs = append(f.GPUs, node.GPUs[b.pos].Index)
		for _, h := range b.holders {
			if key := h.Namespace + "/" + h.Name; !seen[key] {
				seen[key] = true
				f.Holders = append(f.Holders, h)
			}
		}
	}
	slices.Sort(f.GPUs)
	f.Holders = byCost(f.Holders)
	f.cost = costOf(f.Holders)
	return f
}

// heldMemory is the GPU memory freed when h goes: its share's reservation,
// or all of the GPU's memory for a whole GPU.
func heldMemory(g *GPU, h Holder) int64 {
	if h.Milli >= gpu.MilliPerGPU {
		return g.MemoryMiB
	}
	return h.MemoryMiB
}

// byCost orders holders lowest priority first, then largest part first, so
// that taking them in order frees the most for the least.
func byCost(hs []Holder) []Holder {
	out := slices.Clone(hs)
	slices.SortStableFunc(out, func(a, b Holder) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(b.Milli, a.Milli),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func costOf(hs []Holder) fixCost {
	c := fixCost{holders: len(hs)}
	for i, h := range hs {
		if i == 0 || h.Priority > c.maxPriority {
			c.maxPriority = h.Priority
		}
	}
	return c
}

// describe writes the fix as a sentence, e.g. "fits on node-7 GPU 3 if 6
// GiB are freed — held by pods ml/a, ml/b (priority 0)".
func (f *Fix) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fits on %s", f.Node)
	switch {
	case len(f.GPUs) == 0:
	case f.FreeMilli > 0 || f.FreeMemoryMiB > 0:
		fmt.Fprintf(&b, " GPU %d if %s %s freed", f.GPUs[0], amount(f.FreeMilli, f.FreeMemoryMiB), areOrIs(f.FreeMilli, f.FreeMemoryMiB))
	case len(f.GPUs) == 1:
		fmt.Fprintf(&b, " if GPU %d is freed", f.GPUs[0])
	default:
		fmt.Fprintf(&b, " if GPUs %s are freed", joinInts(f.GPUs))
	}
	if len(f.Holders) > 0 {
		b.WriteString(" — held by " + holderList(f.Holders))
	}
	if len(f.HostShort) > 0 {
		if len(f.GPUs) > 0 {
			b.WriteString("; the node also lacks: ")
		} else {
			b.WriteString(" once the node has: ")
		}
		b.WriteString(strings.Join(f.HostShort, ", "))
	}
	return b.String()
}

// amount renders milli-GPU and memory to free: "300 milli-GPU and 6 GiB".
func amount(milli, memoryMiB int64) string {
	var parts []string
	if milli > 0 {
		parts = append(parts, fmt.Sprintf("%d milli-GPU", milli))
	}
	if memoryMiB > 0 {
		parts = append(parts, Memory(memoryMiB))
	}
	return strings.Join(parts, " and ")
}

// areOrIs agrees the verb with amount: "6 GiB are", "300 milli-GPU is".
func areOrIs(_, memoryMiB int64) string {
	if memoryMiB > 0 {
		return "are"
	}
	return "is"
}

// Memory renders MiB in GiB when whole ("6 GiB"), else in MiB.
func Memory(mib int64) string {
	if mib%1024 == 0 {
		return strconv.FormatInt(mib/1024, 10) + " GiB"
	}
	return strconv.FormatInt(mib, 10) + " MiB"
}

// holderList names pods grouped by priority: "pods ml/a, ml/b (priority 0)".
func holderList(hs []Holder) string {
	var groups []string
	for i := 0; i < len(hs); {
		j := i
		var names []string
		for ; j < len(hs) && hs[j].Priority == hs[i].Priority; j++ {
			names = append(names, hs[j].Namespace+"/"+hs[j].Name)
		}
		word := "pod"
		if len(names) > 1 {
			word = "pods"
		}
		groups = append(groups, fmt.Sprintf("%s %s (priority %d)", word, strings.Join(names, ", "), hs[i].Priority))
		i = j
	}
	return strings.Join(groups, ", ")
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
