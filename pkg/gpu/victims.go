package gpu

import (
	"cmp"
	"math/bits"
	"slices"
)

// Victim is a unit that preemption may evict to make room for a pod: one
// pod, or a gang that goes whole. Held is what it holds on the node being
// evaluated; a victim that holds no GPU there frees none.
type Victim struct {
	// Priority is the unit's priority (a gang's is its pods' highest).
	Priority int32
	// Pods is the number of pods evicted with the unit; 0 counts as 1.
	Pods int
	// Held is the unit's assignments on the node. Assignments naming another
	// node are ignored.
	Held []Assignment
}

func (v *Victim) pods() int { return max(1, v.Pods) }

// VictimCost is what evicting a set of victims costs. Costs compare field by
// field, lower first (Compare): the highest priority evicted, then the
// number of pods evicted, then the sum of their priorities. So a pod of
// priority 1 is never evicted where pods of priority 0 would do, however
// many; and among sets of one priority, the fewest pods go.
type VictimCost struct {
	// HighestPriority is the highest priority among the victims; it is
	// meaningful only when Pods > 0.
	HighestPriority int32
	// Pods is the number of pods evicted.
	Pods int
	// PrioritySum is the sum of the evicted pods' priorities, each unit's
	// priority counted once per pod.
	PrioritySum int64
}

// Compare orders costs: negative when c is cheaper than o, 0 when equal.
// Evicting nothing is the cheapest of all.
func (c VictimCost) Compare(o VictimCost) int {
	if c.Pods == 0 || o.Pods == 0 {
		return cmp.Compare(c.Pods, o.Pods)
	}
	return cmp.Or(cmp.Compare(c.HighestPriority, o.HighestPriority), cmp.Compare(c.Pods, o.Pods),
		cmp.Compare(c.PrioritySum, o.PrioritySum))
}

// CostOf is the cost of evicting the victims vs[i] for i in chosen.
func CostOf(vs []Victim, chosen []int) VictimCost {
	var c VictimCost
	for _, i := range chosen {
		v := &vs[i]
		if c.Pods == 0 || v.Priority > c.HighestPriority {
			c.HighestPriority = v.Priority
		}
		c.Pods += v.pods()
		c.PrioritySum += int64(v.Priority) * int64(v.pods())
	}
	return c
}

// maxVictimSets bounds the sets ChooseVictims tries per GPU (a share) or per
// node (whole GPUs) exactly; beyond it, it takes the cheapest holders first.
// Nodes of up to 8 GPUs with up to 12 holders on one GPU are always solved
// exactly.
const maxVictimSets = 1 << 12

// ChooseVictims returns the cheapest set of victims (indices into vs, in
// ascending order) whose eviction lets req fit n, by VictimCost. n is the
// node with every victim's GPUs still allocated; what is not held by a
// victim stays. ok is false when even evicting every victim would not
// do; an empty set with ok true means req fits n already.
//
// The set frees the GPUs of one placement: for a share, holders of one GPU
// only, and of those only as many as the share's milli-GPU and memory need
// (shares are evicted as shares); for whole GPUs, every holder of the
// demand's count of GPUs, and no holder of any other. Victims that hold no
// GPU on n are never chosen: what they free is the host's, which the
// caller's own checks weigh.
//
// The answer is exact (the minimum over every subset of vs) whenever the
// search stays under maxVictimSets; beyond that it takes the cheapest GPUs,
// or a GPU's cheapest holders, first, and still returns a set that fits.
func ChooseVictims(n *NodeGPUs, req *Request, vs []Victim) (chosen []int, ok bool) {
	if Check(n, req).OK() {
		return nil, true
	}
	d := req.Demand
	if n.Inventory == nil || d == nil || d.IsZero() {
		return nil, false
	}
	holders := holdersByDevice(n, vs)
	everyone := make([]int, 0, len(vs))
	for i := range vs {
		everyone = append(everyone, i)
	}
	cleared := n.without(vs, everyone)
	if !Check(cleared, req).OK() {
		return nil, false
	}
	s := victimSearch{n: n, req: req, vs: vs}
	if d.IsShare() {
		for g := range n.Len() {
			if DeviceReason(cleared, d, g) == 0 {
				s.shareOn(g, holders[g])
			}
		}
	} else {
		var usable []int
		for g := range n.Len() {
			if DeviceReason(cleared, d, g) == 0 {
				usable = append(usable, g)
			}
		}
		s.wholeOn(usable, holders)
	}
	if s.best == nil {
		// Every exact and cheapest-first try was refused (GPUs the request
		// excludes); evicting everyone fits, as checked above.
		return everyone, true
	}
	return s.best, true
}

// holdersByDevice lists, per device position of n, the victims holding it.
func holdersByDevice(n *NodeGPUs, vs []Victim) [][]int {
	holders := make([][]int, n.Len())
	for vi := range vs {
		for _, a := range vs[vi].Held {
			if a.Node != "" && a.Node != n.Name {
				continue
			}
			for _, index := range a.Devices {
				if g := n.Inventory.position(index); g >= 0 && !slices.Contains(holders[g], vi) {
					holders[g] = append(holders[g], vi)
				}
			}
		}
	}
	return holders
}

// without is n with the chosen victims' assignments on n given back.
func (n *NodeGPUs) without(vs []Victim, chosen []int) *NodeGPUs {
	out := n.clone()
	for _, i := range chosen {
		for k := range vs[i].Held {
			if a := &vs[i].Held[k]; a.Node == "" || a.Node == n.Name {
				out.apply(a, -1)
			}
		}
	}
	out.summarize()
	return out
}

// victimSearch keeps the cheapest set found that passes Check.
type victimSearch struct {
	n        *NodeGPUs
	req      *Request
	vs       []Victim
	best     []int
	bestCost VictimCost
}

// offer considers set (which it may sort and keep): it becomes the best
// when it is cheaper than the best so far and req fits without it.
func (s *victimSearch) offer(set []int) {
	slices.Sort(set)
	set = slices.Compact(set)
	c := CostOf(s.vs, set)
	if s.best != nil && c.Compare(s.bestCost) >= 0 {
		return
	}
	if !Check(s.n.without(s.vs, set), s.req).OK() {
		return
	}
	s.best, s.bestCost = set, c
}

// shareOn offers the cheapest sets of GPU g's holders that make room for
// the share on g: every subset when there are few, else the cheapest
// holders first until the share fits.
func (s *victimSearch) shareOn(g int, holders []int) {
	if len(holders) == 0 {
		return
	}
	milli := make([]int64, len(holders))
	memory := make([]int64, len(holders))
	for k, vi := range holders {
		milli[k], memory[k] = s.heldOn(vi, g)
	}
	if 1<<len(holders) <= maxVictimSets {
		for mask := uint(1); mask < 1<<len(holders); mask++ {
			var freedMilli, freedMemory int64
			for k := range holders {
				if mask&(1<<uint(k)) != 0 {
					freedMilli += milli[k]
					freedMemory += memory[k]
				}
			}
			if !s.shareFitsFreeing(g, freedMilli, freedMemory) {
				continue
			}
			set := make([]int, 0, bits.OnesCount(mask))
			for k, vi := range holders {
				if mask&(1<<uint(k)) != 0 {
					set = append(set, vi)
				}
			}
			s.offer(set)
		}
		return
	}
	ordered := s.cheapestFirst(holders)
	var freedMilli, freedMemory int64
	for k, vi := range ordered {
		m, mem := s.heldOn(vi, g)
		freedMilli += m
		freedMemory += mem
		if s.shareFitsFreeing(g, freedMilli, freedMemory) {
			s.offer(slices.Clone(ordered[:k+1]))
			return
		}
	}
}

// heldOn is what victim vi holds on device position g: milli-GPU, and the
// memory its shares reserve there.
func (s *victimSearch) heldOn(vi, g int) (milli, memoryMiB int64) {
	for _, a := range s.vs[vi].Held {
		if a.Node != "" && a.Node != s.n.Name {
			continue
		}
		for _, index := range a.Devices {
			if s.n.Inventory.position(index) != g {
				continue
			}
			milli += a.Milli
			if a.Milli < MilliPerGPU {
				memoryMiB += a.MemoryMiB
			}
		}
	}
	return milli, memoryMiB
}

// shareFitsFreeing reports whether the share fits GPU g once freedMilli and
// freedMemoryMiB of its allocation are given back, by the arithmetic of
// NodeGPUs.FreeMilli and FreeMemoryMiB; the GPU's model, size and health
// were checked already.
func (s *victimSearch) shareFitsFreeing(g int, freedMilli, freedMemoryMiB int64) bool {
	d := s.req.Demand
	used := s.n.Used[g].Milli - freedMilli
	if MilliPerGPU-used < d.Milli {
		return false
	}
	return d.MemoryMiB == 0 || used < MilliPerGPU &&
		s.n.Inventory.Devices[g].MemoryMiB-(s.n.Used[g].MemoryMiB-freedMemoryMiB) >= d.MemoryMiB
}

// wholeOn offers, for every choice of the demand's count of GPUs among
// usable (the GPUs that would take the demand were their holders gone),
// the set of all their holders: exactly when the choices are few, else the
// GPUs whose holders cost least first.
func (s *victimSearch) wholeOn(usable []int, holders [][]int) {
	k := s.req.Demand.Count
	if k > len(usable) {
		return
	}
	if combinations(len(usable), k) <= maxVictimSets {
		pick := make([]int, k)
		var walk func(from, depth int)
		walk = func(from, depth int) {
			if depth == k {
				var set []int
				for _, g := range pick {
					set = append(set, holders[g]...)
				}
				s.offer(set)
				return
			}
			for i := from; i <= len(usable)-(k-depth); i++ {
				pick[depth] = usable[i]
				walk(i+1, depth+1)
			}
		}
		walk(0, 0)
		return
	}
	ordered := slices.Clone(usable)
	slices.SortStableFunc(ordered, func(a, b int) int {
		return CostOf(s.vs, holders[a]).Compare(CostOf(s.vs, holders[b]))
	})
	var set []int
	for _, g := range ordered[:k] {
		set = append(set, holders[g]...)
	}
	s.offer(set)
}

// cheapestFirst orders victims by priority, then by fewest pods.
func (s *victimSearch) cheapestFirst(victims []int) []int {
	out := slices.Clone(victims)
	slices.SortStableFunc(out, func(a, b int) int {
		return CostOf(s.vs, []int{a}).Compare(CostOf(s.vs, []int{b}))
	})
	return out
}

// combinations is n choose k, saturating above maxVictimSets.
func combinations(n, k int) int {
	k = min(k, n-k) // C(n, k) = C(n, n-k); the partial products then only grow
	c := 1
	for i := range k {
		c = c * (n - i) / (i + 1)
		if c > maxVictimSets {
			return maxVictimSets + 1
		}
	}
	return c
}
