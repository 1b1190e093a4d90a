// Package packing solves the configuration LP of packing GPU requests onto
// GPUs: items of at most one GPU (a share's milli-GPU, or 1000 for each GPU
// of a whole-GPU pod) packed by per-GPU patterns, ignoring nodes, CPU,
// memory and models. Its dual gives every item size a weight, which is two
// things: a certificate that no placement allocates more than a bound (the
// simulator's floors), and prices that say which sizes go well together on
// one GPU (the PairFit policy). It imports nothing of gpusched's.
package packing

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// GPUMilli is one GPU's capacity in milli-GPU, the size of a whole-GPU item.
const GPUMilli = 1000

// Certificate proves an upper bound on the milli-GPU that any
// placement of a set of items on a number of GPUs allocates. It gives
// each item a weight w of at most its size (a share's milli-GPU; each GPU of
// a whole-GPU pod is an item of 1000) such that no set of items that fits
// on one GPU weighs more than PerGPU. A placement's GPUs then hold at most
// PerGPU × GPUs of weight, and its items at most Σ(size − w) more:
//
//	allocated ≤ PerGPU × GPUs + Σ over the items of (size − w).
//
// It is the dual of the linear relaxation over per-GPU packing patterns
// (the configuration LP), which ignores node boundaries, CPU, memory and
// GPU models: relaxing only loosens the bound, so it holds for every
// placement under every constraint, online or offline.
type Certificate struct {
	// Weights maps an item size (milli-GPU; 1000 for a whole GPU) to its
	// weight.
	Weights map[int64]float64
	// PerGPU is the most weight one GPU holds, found by an exact knapsack
	// over the item sizes and counts.
	PerGPU float64
	// AllocatedMilli is the bound: PerGPU × GPUs + Σ(size − w), at most
	// the items' total.
	AllocatedMilli float64
}

// Bound finds the certificate with the lowest bound for the items (counts[i]
// of size sizes[i], milli-GPU, ascending) on gpus GPUs: the configuration
// LP's dual, solved by adding the packing patterns it violates (the most
// violated, by a knapsack) until none is. The certificate is then checked
// exactly, so it is valid whatever the LP solver's tolerance.
//
// It is LP.Bound's LP without lower bounds: with w_s = s − u_s (kept within
// 0..s) its multipliers are the certificate above, whose bound is then
// computed from the exact knapsack.
func Bound(sizes, counts []int64, gpus int64) (Certificate, error) {
	var total int64
	for i, s := range sizes {
		total += s * counts[i]
	}
	if len(sizes) == 0 || gpus <= 0 {
		return Certificate{Weights: map[int64]float64{}}, nil
	}
	_, u, v, err := NewLP(sizes).solve(make([]int64, len(sizes)), counts, gpus)
	if err != nil {
		return Certificate{}, err
	}
	cert := Certificate{Weights: map[int64]float64{}}
	w := make([]float64, len(sizes))
	for i, s := range sizes {
		w[i] = min(max(float64(s)-u[i]+v[i], 0), float64(s)) // a weight is 0..size
	}
	cert.PerGPU, _ = HeaviestPattern(sizes, counts, w)
	bound := cert.PerGPU * float64(gpus)
	for i, s := range sizes {
		cert.Weights[s] = w[i]
		bound += float64(counts[i]) * (float64(s) - w[i])
	}
	cert.AllocatedMilli = min(bound, float64(total), float64(gpus*GPUMilli))
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
		if w[i] <= 0 {
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

// LP is the configuration LP over a fixed list of item sizes, with
// the packing patterns found so far kept for the next bound: the bounds of
// an online floor's cases differ only in their item counts, so each starts
// from the patterns the others needed.
type LP struct {
	sizes    []int64
	patterns [][]int64
}

func NewLP(sizes []int64) *LP {
	lp := &LP{sizes: sizes}
	for i := range sizes {
		a := make([]int64, len(sizes))
		a[i] = 1
		lp.patterns = append(lp.patterns, a)
	}
	return lp
}

// solve solves Bound's dual, adding the patterns it violates (the most
// violated, by a knapsack) until none is; y, u and v are its multipliers.
func (p *LP) solve(lower, upper []int64, gpus int64) (y float64, u, v []float64, err error) {
	const capV = 4 * GPUMilli
	for range 1000 {
		if y, u, v, err = solveBoundedDual(p.sizes, lower, upper, gpus, p.patterns, capV); err != nil {
			return 0, nil, nil, err
		}
		w := make([]float64, len(p.sizes))
		for i, s := range p.sizes {
			w[i] = float64(s) - u[i] + v[i]
		}
		best, pattern := HeaviestPattern(p.sizes, upper, w)
		if best <= y+1e-7 {
			break
		}
		p.patterns = append(p.patterns, pattern)
	}
	return y, u, v, nil
}

// bound is an upper bound on the milli-GPU of any packing on gpus GPUs that
// places, of each size, at least lower and at most upper items: the
// configuration LP with both bounds, through its dual. With multipliers
// y ≥ 0 (GPUs), u_s ≥ 0 (upper bounds) and 0 ≤ v_s ≤ V (lower bounds) such
// that every pattern a weighs Σ a_s·(s − u_s + v_s) ≤ y,
//
//	allocated ≤ GPUs·y + Σ upper_s·u_s − Σ lower_s·v_s.
//
// Capping v_s at V keeps the restricted LP bounded while patterns are added,
// and only narrows the dual, as do patterns kept from other bounds that
// these counts would not allow: every answer is still a bound. y is checked
// by the exact knapsack at the end. The bound is at most the items' total
// and the GPUs' capacity.
func (p *LP) Bound(lower, upper []int64, gpus int64) float64 {
	var total float64
	for i, s := range p.sizes {
		total += float64(s * upper[i])
	}
	if total == 0 || gpus <= 0 {
		return 0
	}
	y, u, v, err := p.solve(lower, upper, gpus)
	if err != nil {
		return min(total, float64(gpus*GPUMilli)) // no certificate: the items and the GPUs bound it
	}
	w := make([]float64, len(p.sizes))
	for i, s := range p.sizes {
		w[i] = float64(s) - u[i] + v[i]
	}
	perGPU, _ := HeaviestPattern(p.sizes, upper, w)
	bound := math.Max(y, perGPU) * float64(gpus)
	for i := range p.sizes {
		bound += float64(upper[i])*u[i] - float64(lower[i])*v[i]
	}
	return min(bound, total, float64(gpus*GPUMilli))
}

// solveBoundedDual solves LP.Bound's dual restricted to
// patterns. Standard form for the simplex: variables y, u_1..u_k,
// v_1..v_k, a surplus per pattern, a slack per v_s ≤ capV.
func solveBoundedDual(sizes, lower, upper []int64, gpus int64, patterns [][]int64, capV float64) (y float64, u, v []float64, err error) {
	k, p := len(sizes), len(patterns)
	rows, cols := p+k, 1+2*k+p+k
	A := mat.NewDense(rows, cols, nil)
	b := make([]float64, rows)
	c := make([]float64, cols)
	c[0] = float64(gpus)
	for i := range k {
		c[1+i] = float64(upper[i])
		c[1+k+i] = -float64(lower[i])
	}
	for r, a := range patterns {
		A.Set(r, 0, 1)
		for i, n := range a {
			if n > 0 {
				A.Set(r, 1+i, float64(n))
				A.Set(r, 1+k+i, -float64(n))
				b[r] += float64(n * sizes[i])
			}
		}
		A.Set(r, 1+2*k+r, -1)
	}
	for i := range k {
		A.Set(p+i, 1+k+i, 1)
		A.Set(p+i, 1+2*k+p+i, 1)
		b[p+i] = capV
	}
	_, x, err := simplex(c, A, b)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("the bounded packing LP: %w", err)
	}
	return x[0], x[1 : 1+k], x[1+k : 1+2*k], nil
}

// simplex solves min c·x, A·x = b, x ≥ 0 with gonum's simplex, b first
// raised by a distinct amount under 10⁻⁶ per row. Dantzig's rule, which
// gonum uses, can cycle on a degenerate LP, and the packing LPs are
// degenerate (many patterns tie); distinct right-hand sides make ties
// unlikely. Raising b only tightens each constraint (y + Σ a·(u − v) ≥ load
// + ε) or loosens a cap (u_s ≤ s + ε, v_s ≤ V + ε), so every solution still
// yields a valid bound, which the callers check exactly anyway.
func simplex(c []float64, A *mat.Dense, b []float64) (float64, []float64, error) {
	for i := range b {
		b[i] += 1e-6 * float64(1+(i*7919)%997) / 997
	}
	return lp.Simplex(c, A, b, 1e-9, nil)
}
