package packing

import (
	"errors"
	"math"
)

// master is the configuration LP's primal restricted to the patterns found
// so far, solved by the revised simplex method with an explicit inverse of
// the basis. Its rows are fixed: one per class of GPUs, then per kind an
// upper and a lower row, so new patterns come in as columns and the last
// optimal basis stays feasible:
//
//	max  Σ load(p)·x_p − V·Σ z_k
//	     Σ over class c's patterns of x_p + s_c  = GPUs_c   (dual y_c ≥ 0)
//	     Σ a_p,k·x_p + t_k                       = upper_k  (dual u_k ≥ 0)
//	     Σ a_p,k·x_p + z_k − r_k                 = lower_k  (dual −v_k, 0 ≤ v_k ≤ V)
//
// z_k lets the case place fewer than lower_k items at a cost of V each: the
// restricted LP stays feasible, and a case with no packing gets a bound far
// below 0. At an optimum its duals are LP.Bound's multipliers: every column
// prices out, which for a pattern is Σ a·(size − u + v) ≤ y_c. The basis of
// s, t and, per lower row, z or r (±1 on the diagonal) is feasible, so no
// first phase is needed.
type master struct {
	classes, kinds int
	cols           []column
	basis          []int       // per row, its basic column
	inverse        [][]float64 // the basis's inverse, rows × rows
	value          []float64   // per row, its basic column's value
	b              []float64   // the right-hand side
	pivots         int         // since the inverse was last computed afresh
	bland          bool        // pivot by Bland's rule: set once the objective stalls
}

// column is a column of the master: its entries by row, and its cost.
type column struct {
	rows []int
	vals []float64
	cost float64
}

// newMaster is the master of kinds on gpus[c] GPUs per class, with the
// bounds lower and upper, starting from the identity basis.
func newMaster(kinds []Kind, lower, upper, gpus []int64, capV float64) *master {
	nc, k := len(gpus), len(kinds)
	m := &master{classes: nc, kinds: k}
	rows := nc + 2*k
	rhs := make([]float64, rows)
	for c, g := range gpus {
		rhs[c] = float64(g)
		m.cols = append(m.cols, column{rows: []int{c}, vals: []float64{1}}) // s_c
	}
	for i := range kinds {
		rhs[nc+i], rhs[nc+k+i] = float64(upper[i]), float64(lower[i])
		m.cols = append(m.cols, column{rows: []int{nc + i}, vals: []float64{1}}) // t_k
	}
	for i := range kinds {
		m.cols = append(m.cols, column{rows: []int{nc + k + i}, vals: []float64{1}, cost: -capV}) // z_k
	}
	for i := range kinds {
		m.cols = append(m.cols, column{rows: []int{nc + k + i}, vals: []float64{-1}}) // r_k
	}
	// The basis: s and t, then per lower row z_k = lower_k when items are
	// forced in, else r_k = 0 (−1 in its row, so −1 in the inverse), which
	// leaves v_k at 0.
	m.basis = make([]int, rows)
	m.inverse = identity(rows)
	for r := range nc + k {
		m.basis[r] = r
	}
	for i := range kinds {
		r := nc + k + i
		if lower[i] > 0 {
			m.basis[r] = nc + k + i // z_k
		} else {
			m.basis[r] = nc + 2*k + i // r_k
			m.inverse[r][r] = -1
		}
	}
	m.b = rhs
	m.value = make([]float64, rows)
	for r := range rows {
		m.value[r] = m.inverse[r][r] * rhs[r]
	}
	return m
}

// addPattern adds a pattern of class c as a column.
func (m *master) addPattern(kinds []Kind, c int, counts []int64) {
	col := column{rows: []int{c}, vals: []float64{1}}
	for i, n := range counts {
		if n > 0 {
			col.rows = append(col.rows, m.classes+i, m.classes+m.kinds+i)
			col.vals = append(col.vals, float64(n), float64(n))
			col.cost += float64(n * kinds[i].Size)
		}
	}
	m.cols = append(m.cols, col)
}

// duals are the basis's simplex multipliers, π = c_B·B⁻¹, split into y, u
// and v, with rounding errors that would take u or v out of their ranges
// (u ≥ 0, 0 ≤ v ≤ V) clamped: the bounds computed from them stay valid.
func (m *master) duals(capV float64) (y, u, v []float64) {
	pi := m.pi()
	nc, k := m.classes, m.kinds
	y, u, v = pi[:nc], make([]float64, k), make([]float64, k)
	for i := range k {
		u[i] = max(pi[nc+i], 0)
		v[i] = min(max(-pi[nc+k+i], 0), capV)
	}
	return y, u, v
}

func (m *master) pi() []float64 {
	pi := make([]float64, len(m.basis))
	for r, j := range m.basis {
		if cb := m.cols[j].cost; cb != 0 {
			for q, x := range m.inverse[r] {
				pi[q] += cb * x
			}
		}
	}
	return pi
}

// errUnbounded: the master is bounded (every pattern uses a GPU of its
// class), so this is a numerical failure.
var errUnbounded = errors.New("the packing LP's master is unbounded: a numerical failure")

// solve pivots to an optimum: Dantzig's rule (the column of most reduced
// cost enters) until the objective stalls for stallPivots pivots, then
// Bland's (the lowest-numbered improving column enters, the lowest-numbered
// of the tied leaving ones leaves), which cannot cycle.
func (m *master) solve() error {
	const eps, stallPivots, maxPivots = 1e-9, 50, 200000
	stalled := 0
	for range maxPivots {
		pi := m.pi()
		enter, best := -1, eps
		for j := range m.cols {
			d := m.cols[j].cost
			for e, r := range m.cols[j].rows {
				d -= pi[r] * m.cols[j].vals[e]
			}
			if d > best {
				enter, best = j, d
				if m.bland {
					break
				}
			}
		}
		if enter < 0 {
			return nil
		}
		alpha := m.column(enter)
		leave, ratio := -1, math.Inf(1)
		for r, a := range alpha {
			if a <= eps {
				continue
			}
			t := max(m.value[r], 0) / a
			if t < ratio-1e-12 || (t <= ratio+1e-12 && leave >= 0 && m.basis[r] < m.basis[leave]) {
				leave, ratio = r, t
			}
		}
		if leave < 0 {
			return errUnbounded
		}
		if ratio*best <= 1e-12 {
			if stalled++; stalled >= stallPivots {
				m.bland = true
			}
		} else {
			stalled = 0
		}
		m.pivot(enter, leave, alpha)
	}
	return errors.New("the packing LP did not reach an optimum within its pivots")
}

// column is B⁻¹ times column j.
func (m *master) column(j int) []float64 {
	alpha := make([]float64, len(m.basis))
	for e, r := range m.cols[j].rows {
		val := m.cols[j].vals[e]
		for q := range alpha {
			alpha[q] += m.inverse[q][r] * val
		}
	}
	return alpha
}

// pivot brings column enter into the basis in place of row leave's.
func (m *master) pivot(enter, leave int, alpha []float64) {
	p := alpha[leave]
	lead := m.inverse[leave]
	for q := range lead {
		lead[q] /= p
	}
	m.value[leave] /= p
	for r := range m.basis {
		if r == leave || alpha[r] == 0 {
			continue
		}
		f := alpha[r]
		row := m.inverse[r]
		for q := range row {
			row[q] -= f * lead[q]
		}
		m.value[r] -= f * m.value[leave]
	}
	m.basis[leave] = enter
	if m.pivots++; m.pivots >= refactorPivots {
		m.refactor()
	}
}

// refactorPivots is how many pivots the inverse is updated in place before
// it is computed afresh, so that rounding errors do not pile up.
const refactorPivots = 100

// refactor computes the basis's inverse afresh by Gauss-Jordan elimination
// with partial pivoting, and the basic values from it. A basis found
// singular (rounding only could make it so) keeps the updated inverse.
func (m *master) refactor() {
	n := len(m.basis)
	a := make([][]float64, n) // B | I
	for r := range a {
		a[r] = make([]float64, 2*n)
		a[r][n+r] = 1
	}
	for q, j := range m.basis {
		for e, r := range m.cols[j].rows {
			a[r][q] = m.cols[j].vals[e]
		}
	}
	for q := range n {
		p := q
		for r := q + 1; r < n; r++ {
			if math.Abs(a[r][q]) > math.Abs(a[p][q]) {
				p = r
			}
		}
		if math.Abs(a[p][q]) < 1e-12 {
			m.pivots = 0 // try again refactorPivots pivots later
			return
		}
		a[q], a[p] = a[p], a[q]
		lead := a[q]
		f := lead[q]
		for x := range lead {
			lead[x] /= f
		}
		for r := range n {
			if r != q && a[r][q] != 0 {
				g := a[r][q]
				for x := range a[r] {
					a[r][x] -= g * lead[x]
				}
			}
		}
	}
	// Row q of the reduced B now stands for basic column q: B⁻¹'s row q.
	for q := range n {
		copy(m.inverse[q], a[q][n:])
	}
	for q := range n {
		var x float64
		for r, inv := range m.inverse[q] {
			x += inv * m.b[r]
		}
		m.value[q] = x
	}
	m.pivots = 0
}

func identity(n int) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		out[i] = make([]float64, n)
		out[i][i] = 1
	}
	return out
}
