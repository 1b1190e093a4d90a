package gpu_test

import (
	"slices"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNodeOrderRank: the order the simulator and what-if break ties in:
// rng.Perm(n) of a PCG seeded with (seed, 0x5deece66d), the i-th drawn node
// ranked i.
func TestNodeOrderRank(t *testing.T) {
	tests := []struct {
		n    int
		seed int64
		want []int // rank of each node
	}{
		{2, 42, []int{0, 1}},    // Perm [0 1]
		{2, 1, []int{1, 0}},     // Perm [1 0]
		{3, 42, []int{1, 2, 0}}, // Perm [2 0 1]: node 2 first, then 0, then 1
	}
	for _, tt := range tests {
		if got := gpu.NodeOrderRank(tt.n, tt.seed); !slices.Equal(got, tt.want) {
			t.Errorf("rank(%d nodes, seed %d) = %v, want %v", tt.n, tt.seed, got, tt.want)
		}
	}
}
