// Package packing solves the configuration LP of packing GPU requests onto
// GPUs: items of at most one GPU (a share's milli-GPU, or 1000 for each GPU
// of a whole-GPU pod) packed by per-GPU patterns, ignoring nodes, CPU and
// memory; an item may be limited to some classes of GPUs (GPU models). Its
// dual gives every kind of item a weight, which is two
// things: a certificate that no placement allocates more than a bound (the
// simulator's floors), and prices that say which sizes go well together on
// one GPU (the PairFit policy). It imports nothing of gpusched's.
package packing

import (
	"math"
	"slices"
)

// GPUMilli is one GPU's capacity in milli-GPU, the size of a whole-GPU item.
const GPUMilli = 1000

// Kind is a kind of item: its size (a share's milli-GPU; 1000 for each GPU
// of a whole-GPU pod) and the classes of GPUs it may go on. A class is a
// set of GPUs that the same kinds may use, such as the GPUs of one model.
type Kind struct {
	Size int64
	// Classes are the indices of the classes the item may go on; nil means
	// every class.
	Classes []int
}

// Kinds are one kind per size, each allowed on every class: the LP
// without models.
func Kinds(sizes []int64) []Kind {
	kinds := make([]Kind, len(sizes))
	for i, s := range sizes {
		kinds[i] = Kind{Size: s}
	}
	return kinds
}

// Allows reports whether the kind may go on class c.
func (k *Kind) Allows(c int) bool {
	return k.Classes == nil || slices.Contains(k.Classes, c)
}

// Certificate proves an upper bound on the milli-GPU that any placement of
// a set of items on classes of GPUs allocates. It gives each kind of item a
// weight w of at most its size such that no set of items that fits on one
// GPU of class c, all of kinds allowed on c, weighs more than PerGPU[c]. A
// placement's GPUs then hold at most Σ PerGPU[c] × GPUs[c] of weight, and
// its items at most Σ(size − w) more:
//
//	allocated ≤ Σ over the classes of PerGPU × GPUs + Σ over the items of (size − w).
//
// It is the dual of the linear relaxation over per-GPU packing patterns
// (the configuration LP), which ignores node boundaries, CPU and memory:
// relaxing only loosens the bound, so it holds for every placement under
// every other constraint, online or offline. An item allowed on no class
// with GPUs weighs its size, and adds nothing to the bound: it cannot be
// placed.
type Certificate struct {
	// Weights is each kind's weight, in the order of the kinds.
	Weights []float64
	// PerGPU is the most weight one GPU of each class holds, found by an
	// exact knapsack over the kinds allowed on it and their counts.
	PerGPU []float64
	// AllocatedMilli is the bound: Σ PerGPU × GPUs + Σ(size − w), at most
	// the items' total and the GPUs' capacity.
	AllocatedMilli float64
}

// Bound finds the certificate with the lowest bound for counts[i] items of
// kinds[i] on gpus[c] GPUs of each class c: the configuration LP's dual,
// solved by adding the packing patterns it violates (the most violated of
// each class, by a knapsack) until none is. The certificate is then checked
// exactly, so it is valid whatever the LP solver's tolerance.
//
// It is LP.Bound's LP without lower bounds: with w = size − u (kept within
// 0..size) its multipliers are the certificate above, whose bound is then
// computed from the exact knapsacks.
func Bound(kinds []Kind, counts, gpus []int64) (Certificate, error) {
	var total, capacity int64
	for i, k := range kinds {
		total += k.Size * counts[i]
	}
	for _, g := range gpus {
		capacity += g * GPUMilli
	}
	cert := Certificate{Weights: make([]float64, len(kinds)), PerGPU: make([]float64, len(gpus))}
	if len(kinds) == 0 || capacity <= 0 {
		return cert, nil
	}
	lp := NewLP(kinds, len(gpus))
	_, u, v, err := lp.solve(make([]int64, len(kinds)), counts, gpus)
	if err != nil {
		return Certificate{}, err
	}
	for i, k := range kinds {
		cert.Weights[i] = min(max(float64(k.Size)-u[i]+v[i], 0), float64(k.Size)) // a weight is 0..size
	}
	var bound float64
	for c, g := range gpus {
		cert.PerGPU[c], _ = lp.heaviest(c, counts, cert.Weights)
		bound += cert.PerGPU[c] * float64(g)
	}
	for i, k := range kinds {
		bound += float64(counts[i]) * (float64(k.Size) - cert.Weights[i])
	}
	cert.AllocatedMilli = min(bound, float64(total), float64(capacity))
	return cert, nil
}

// HeaviestPattern is the heaviest set of items that fits one GPU, at most
// counts[i] of size sizes[i], and its weight: a bounded knapsack over the
// GPU's 1000 milli-GPU, exact.
func HeaviestPattern(sizes, counts []int64, w []float64) (float64, []int64) {
	const capacity = GPUMilli
	// Split each size's copies into powers of two (0/1 knapsack items).
	type item struct {
		kind   int
		copies int64
		size   int64
		weigh  float64
	}
	var items []item
	for i, s := range sizes {
		if w[i] <= 0 || s <= 0 {
			continue
		}
		n := min(counts[i], capacity/s)
		for c := int64(1); n > 0; c *= 2 {
			take := min(c, n)
			items = append(items, item{i, take, take * s, float64(take) * w[i]})
			n -= take
		}
	}
	best := make([][]float64, len(items)+1)
	best[0] = make([]float64, capacity+1)
	for j, it := range items {
		prev, cur := best[j], make([]float64, capacity+1)
		for c := range cur {
			cur[c] = prev[c]
			if int64(c) >= it.size {
				cur[c] = max(cur[c], prev[int64(c)-it.size]+it.weigh)
			}
		}
		best[j+1] = cur
	}
	pattern := make([]int64, len(sizes))
	c := int64(capacity)
	for j := len(items); j > 0; j-- {
		if best[j][c] != best[j-1][c] {
			it := items[j-1]
			pattern[it.kind] += it.copies
			c -= it.size
		}
	}
	return best[len(items)][capacity], pattern
}

// LP is the configuration LP over a fixed list of item kinds on a number of
// classes of GPUs, with the packing patterns found so far kept for the next
// bound: the bounds of an online floor's cases differ only in their item
// counts, so each starts from the patterns the others needed.
type LP struct {
	kinds    []Kind
	classes  int
	patterns []pattern
}

// pattern is a set of items that fits one GPU of a class: counts per kind.
type pattern struct {
	class  int
	counts []int64
}

// NewLP is the LP of the kinds on classes classes, starting from one
// pattern per kind and class it may go on: the item alone.
func NewLP(kinds []Kind, classes int) *LP {
	lp := &LP{kinds: kinds, classes: classes}
	for i := range kinds {
		for c := range classes {
			if kinds[i].Allows(c) {
				a := make([]int64, len(kinds))
				a[i] = 1
				lp.patterns = append(lp.patterns, pattern{c, a})
			}
		}
	}
	return lp
}

// heaviest is HeaviestPattern on one GPU of class c: the kinds it does not
// allow count as none.
func (p *LP) heaviest(c int, counts []int64, w []float64) (float64, []int64) {
	sizes, allowed := make([]int64, len(p.kinds)), make([]int64, len(p.kinds))
	for i := range p.kinds {
		sizes[i] = p.kinds[i].Size
		if p.kinds[i].Allows(c) {
			allowed[i] = counts[i]
		}
	}
	return HeaviestPattern(sizes, allowed, w)
}

// solve solves Bound's LP by column generation: the master LP (master) on
// the patterns found so far, then per class the pattern its duals price
// highest (a knapsack), added while it prices above the class's y. y (per
// class), u and v are the last master's duals.
func (p *LP) solve(lower, upper, gpus []int64) (y, u, v []float64, err error) {
	const capV = 4 * GPUMilli
	m := newMaster(p.kinds, lower, upper, gpus, capV)
	for _, a := range p.patterns {
		m.addPattern(p.kinds, a.class, a.counts)
	}
	for range 1000 {
		if err := m.solve(); err != nil {
			return nil, nil, nil, err
		}
		y, u, v = m.duals(capV)
		w := make([]float64, len(p.kinds))
		for i, k := range p.kinds {
			w[i] = float64(k.Size) - u[i] + v[i]
		}
		added := false
		for c := range p.classes {
			if best, counts := p.heaviest(c, upper, w); best > y[c]+1e-7 {
				p.patterns = append(p.patterns, pattern{c, counts})
				m.addPattern(p.kinds, c, counts)
				added = true
			}
		}
		if !added {
			break
		}
	}
	return y, u, v, nil
}

// Bound is an upper bound on the milli-GPU of any packing on gpus[c] GPUs
// of each class c that places, of each kind, at least lower and at most
// upper items: the configuration LP with both bounds, through its dual.
// With multipliers y_c ≥ 0 (GPUs of class c), u_k ≥ 0 (upper bounds) and
// 0 ≤ v_k ≤ V (lower bounds) such that every pattern a of class c weighs
// Σ a_k·(size_k − u_k + v_k) ≤ y_c,
//
//	allocated ≤ Σ GPUs_c·y_c + Σ upper_k·u_k − Σ lower_k·v_k.
//
// Capping v_k at V keeps the restricted LP bounded while patterns are added,
// and only narrows the dual, as do patterns kept from other bounds that
// these counts would not allow: every answer is still a bound. Each y_c is
// checked by the exact knapsack at the end. The bound is at most the items'
// total and the GPUs' capacity.
func (p *LP) Bound(lower, upper, gpus []int64) float64 {
	var total, capacity float64
	for i, k := range p.kinds {
		total += float64(k.Size * upper[i])
	}
	for _, g := range gpus {
		capacity += float64(g * GPUMilli)
	}
	if total == 0 || capacity <= 0 {
		return 0
	}
	y, u, v, err := p.solve(lower, upper, gpus)
	if err != nil {
		return min(total, capacity) // no certificate: the items and the GPUs bound it
	}
	w := make([]float64, len(p.kinds))
	for i, k := range p.kinds {
		w[i] = float64(k.Size) - u[i] + v[i]
	}
	var bound float64
	for c, g := range gpus {
		perGPU, _ := p.heaviest(c, upper, w)
		bound += math.Max(y[c], perGPU) * float64(g)
	}
	for i := range p.kinds {
		bound += float64(upper[i])*u[i] - float64(lower[i])*v[i]
	}
	return min(bound, total, capacity)
}
