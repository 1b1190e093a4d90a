package packing

import (
	"math"
	"testing"
)

// TestHeaviestPattern: the knapsack finds the heaviest set that fits one GPU.
func TestHeaviestPattern(t *testing.T) {
	sizes, counts := []int64{160, 470, 810}, []int64{5, 3, 2}
	// 470 + 470 weighs 2 × 405 = 810; 810 + 160 weighs 810 + 0; 470 + 160×3
	// = 950 weighs 405: the pair of 470s or the 810 alone, 810.
	got, pattern := HeaviestPattern(sizes, counts, []float64{0, 405, 810})
	if got != 810 {
		t.Errorf("heaviest %v, want 810 (pattern %v)", got, pattern)
	}
	// With the 160s weighing 100: 810 + 160 = 910 beats 470 + 470 = 810.
	if got, pattern := HeaviestPattern(sizes, counts, []float64{100, 405, 810}); got != 910 || pattern[0] != 1 || pattern[2] != 1 {
		t.Errorf("heaviest %v %v, want 910 from one 160 and one 810", got, pattern)
	}
}

// TestBoundedPackingBound: lower bounds force items in. Two GPUs and items
// 600, 600, 400, 400, 1000: the best packing is 600+400 twice (2000); with
// the whole GPU forced in, one GPU takes it and the other 600+400 (2000);
// with both 600s and the whole GPU forced in, they cannot all fit: no
// packing is in the case, and the bound says so by going below 0.
func TestBoundedPackingBound(t *testing.T) {
	sizes := []int64{400, 600, 1000}
	upper := []int64{2, 2, 1}
	tests := []struct {
		name  string
		lower []int64
		want  float64
	}{
		{"nothing forced", []int64{0, 0, 0}, 2000},
		{"the whole GPU forced in", []int64{0, 0, 1}, 2000},
		// 1000 + 600 on two GPUs, the other 600 forced too: no packing.
		// The LP may leave a forced item out at a cost of V = 4000: its best
		// is 600+400 twice without the whole GPU, 2000 − 4000.
		{"more forced than fits", []int64{0, 2, 1}, -2000},
		// The 400s forced, the 600s and the whole GPU free: 400+600 twice.
		{"the small items forced", []int64{2, 0, 0}, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewLP(Kinds(sizes), 1).Bound(tt.lower, upper, []int64{2}); math.Abs(got-tt.want) > 1e-3 {
				t.Errorf("bound %v, want %v", got, tt.want)
			}
		})
	}
	// Without lower bounds it is the certificate's bound: 810, 810, 160,
	// 470, 470, 320 and a pod of two whole GPUs on four GPUs.
	s, c := []int64{160, 320, 470, 810, 1000}, []int64{1, 1, 2, 2, 2}
	cert, err := Bound(Kinds(s), c, []int64{4})
	if err != nil {
		t.Fatal(err)
	}
	if got := NewLP(Kinds(s), 1).Bound(make([]int64, len(s)), c, []int64{4}); math.Abs(got-cert.AllocatedMilli) > 1e-3 {
		t.Errorf("bound %v without lower bounds, the certificate's %v", got, cert.AllocatedMilli)
	}
}

// TestModelBound: items limited to classes of GPUs (models). Each case's
// bound is the most any placement allocates, which the arithmetic beside it
// shows, and its certificate is checked as a certificate.
func TestModelBound(t *testing.T) {
	// Classes: 0 is model A, 1 is model B.
	onA, onB, any := []int{0}, []int{1}, []int(nil)
	tests := []struct {
		name   string
		kinds  []Kind
		counts []int64
		gpus   []int64
		want   float64
	}{
		// Three whole GPUs allowed only on A, which has 2, and one whole
		// GPU of any model; B has 2: 2 on A, the free one on B, and B's
		// other GPU stays idle. 3000 of 4000, where without models 4000:
		// the constrained item that does not fit raises the bound by
		// exactly its size.
		{"a model with too few GPUs", []Kind{{1000, onA}, {1000, any}}, []int64{3, 1}, []int64{2, 2}, 3000},
		// The same items without models fill all four GPUs.
		{"no models", Kinds([]int64{1000}), []int64{4}, []int64{4}, 4000},
		// Two 600s allowed only on A (one GPU) never share it: 600. A 400
		// of any model goes beside it: 1000. B's GPU takes the 400 of B: 1400.
		{"shares of a scarce model", []Kind{{400, onB}, {400, any}, {600, onA}}, []int64{1, 1, 2}, []int64{1, 1}, 1400},
		// Items of a model without GPUs cannot be placed at all.
		{"a model with no GPUs", []Kind{{500, onB}, {500, any}}, []int64{4, 1}, []int64{2, 0}, 500},
		// A kind allowed on both classes is the same as one of any model.
		{"both classes listed", []Kind{{1000, []int{0, 1}}}, []int64{5}, []int64{2, 2}, 4000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := Bound(tt.kinds, tt.counts, tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(cert.AllocatedMilli-tt.want) > 1e-3 {
				t.Errorf("bound %v, want %v (certificate %+v)", cert.AllocatedMilli, tt.want, cert)
			}
			// The certificate is one: on every class, no set of allowed items
			// weighs more than its PerGPU, and the bound is its arithmetic.
			lp := NewLP(tt.kinds, len(tt.gpus))
			var bound, total float64
			for c, g := range tt.gpus {
				if heaviest, _ := lp.heaviest(c, tt.counts, cert.Weights); heaviest > cert.PerGPU[c]+1e-9 {
					t.Errorf("a GPU of class %d holds %v of weight, more than the certificate's %v", c, heaviest, cert.PerGPU[c])
				}
				bound += cert.PerGPU[c] * float64(g)
			}
			for i, k := range tt.kinds {
				if w := cert.Weights[i]; w < 0 || w > float64(k.Size) {
					t.Errorf("kind %d weighs %v: want 0..%d", i, w, k.Size)
				}
				bound += float64(tt.counts[i]) * (float64(k.Size) - cert.Weights[i])
				total += float64(tt.counts[i] * k.Size)
			}
			if want := math.Min(bound, total); cert.AllocatedMilli > want+1e-6 {
				t.Errorf("bound %v, but the certificate's arithmetic gives %v", cert.AllocatedMilli, want)
			}
			// Without lower bounds the LP's bound is the certificate's.
			if got := lp.Bound(make([]int64, len(tt.kinds)), tt.counts, tt.gpus); math.Abs(got-cert.AllocatedMilli) > 1e-3 {
				t.Errorf("LP bound %v, the certificate's %v", got, cert.AllocatedMilli)
			}
		})
	}
}

// TestDegenerateModels: a degenerate LP of three models (a random
// workload on which a dense simplex with a first phase found its basis
// singular) is solved, and its bound is within the items'.
func TestDegenerateModels(t *testing.T) {
	any := []int(nil)
	kinds := []Kind{{100, any}, {100, []int{2}}, {140, any}, {160, any}, {200, any}, {230, any}, {230, []int{0}},
		{250, any}, {270, any}, {300, any}, {330, any}, {350, any}, {370, any}, {460, []int{1}}, {470, any},
		{480, []int{2}}, {550, any}, {600, any}, {700, any}, {750, any}, {810, any}}
	counts := []int64{1, 1, 4, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1}
	cert, err := Bound(kinds, counts, []int64{1, 6, 1})
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for i, k := range kinds {
		total += float64(counts[i] * k.Size)
	}
	if cert.AllocatedMilli <= 0 || cert.AllocatedMilli > total {
		t.Errorf("bound %v, want within 0..%v", cert.AllocatedMilli, total)
	}
}

// TestModelBoundForcedIn: lower bounds on kinds limited to a class. Two
// whole GPUs forced in on class A, which has one GPU, and one of any class
// beside them, on A and B of one GPU each: no packing places both, and the
// LP, which may leave a forced item out at a cost of V = 4000, bounds the
// case at its best, 1000 on A + 1000 on B − 4000 = −2000. With one forced
// in, the case has a packing: 2000.
func TestModelBoundForcedIn(t *testing.T) {
	kinds := []Kind{{1000, []int{0}}, {1000, nil}}
	upper, gpus := []int64{2, 1}, []int64{1, 1}
	lp := NewLP(kinds, 2)
	if got := lp.Bound([]int64{2, 0}, upper, gpus); math.Abs(got-(-2000)) > 1e-3 {
		t.Errorf("two forced onto one GPU: bound %v, want -2000", got)
	}
	if got := lp.Bound([]int64{1, 0}, upper, gpus); math.Abs(got-2000) > 1e-3 {
		t.Errorf("one forced: bound %v, want 2000", got)
	}
}
