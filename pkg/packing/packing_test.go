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
			if got := NewLP(sizes).Bound(tt.lower, upper, 2); math.Abs(got-tt.want) > 1e-3 {
				t.Errorf("bound %v, want %v", got, tt.want)
			}
		})
	}
	// Without lower bounds it is the certificate's bound: 810, 810, 160,
	// 470, 470, 320 and a pod of two whole GPUs on four GPUs.
	s, c := []int64{160, 320, 470, 810, 1000}, []int64{1, 1, 2, 2, 2}
	cert, err := Bound(s, c, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := NewLP(s).Bound(make([]int64, len(s)), c, 4); math.Abs(got-cert.AllocatedMilli) > 1e-3 {
		t.Errorf("bound %v without lower bounds, the certificate's %v", got, cert.AllocatedMilli)
	}
}
