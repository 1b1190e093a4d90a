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

// TestBestNode: the highest score wins; among equal scores the node-order
// tie-break takes the lowest rank, and the random one draws each tied node
// about as often as the others (kube-scheduler's reservoir of one).
func TestBestNode(t *testing.T) {
	scores := []int64{5, 7, 7, 3, 7}
	score := func(i int) int64 { return scores[i] }
	rank := []int{0, 4, 2, 1, 3} // of the ties 1, 2 and 4, node 2 ranks first
	if got := gpu.BestByRank(len(scores), score, func(i int) int { return rank[i] }); got != 2 {
		t.Errorf("BestByRank = %d, want 2 (score 7, rank 2)", got)
	}
	if got := gpu.BestByRank(1, score, func(int) int { return 0 }); got != 0 {
		t.Errorf("BestByRank of one node = %d, want 0", got)
	}
	counts := map[int]int{}
	for seed := range int64(3000) {
		counts[gpu.BestAtRandom(len(scores), score, gpu.TieBreakRand(seed))]++
	}
	// 3000 draws over 3 ties: 1000 each expected; 850 is more than 5
	// standard deviations (about 26) below.
	for _, i := range []int{1, 2, 4} {
		if counts[i] < 850 {
			t.Errorf("BestAtRandom chose node %d %d times in 3000; want about 1000 (counts %v)", i, counts[i], counts)
		}
	}
	if counts[0]+counts[3] != 0 {
		t.Errorf("BestAtRandom chose a node without the highest score: %v", counts)
	}
}
