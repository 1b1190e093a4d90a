package gpu

import "math/rand/v2"

// tieBreakStream is the second word of the PCG that breaks ties for a seed.
const tieBreakStream = 0x5deece66d

// TieBreakRand is the generator that breaks ties between equally scored
// nodes in a run with seed: the simulator's random tie-break draws from it.
func TieBreakRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), tieBreakStream))
}

// NodeOrderRank is the node-order tie-break of a run with seed over nodes
// 0..n-1 (the FGD paper's simulator): rank[i] is node i's place in the
// permutation TieBreakRand(seed) draws first, and of equally scored nodes
// the lowest rank wins. The simulator and what-if both rank nodes with it,
// so what-if breaks ties as a simulator run with the same seed does.
func NodeOrderRank(n int, seed int64) []int {
	rank := make([]int, n)
	for i, j := range TieBreakRand(seed).Perm(n) {
		rank[j] = i
	}
	return rank
}

// BestByRank is the node-order tie-break: of n nodes, the index of the
// highest score, ties going to the lowest rank (NodeOrderRank).
func BestByRank(n int, score func(i int) int64, rank func(i int) int) int {
	best := 0
	for i := 1; i < n; i++ {
		if s, b := score(i), score(best); s > b || (s == b && rank(i) < rank(best)) {
			best = i
		}
	}
	return best
}

// BestAtRandom is the random tie-break, kube-scheduler's: of n nodes, the
// index of the highest score, ties going to one drawn uniformly from rng
// (TieBreakRand) as the scores are read, one draw per tie.
func BestAtRandom(n int, score func(i int) int64, rng *rand.Rand) int {
	best, ties := 0, 1
	for i := 1; i < n; i++ {
		switch s, b := score(i), score(best); {
		case s > b:
			best, ties = i, 1
		case s == b:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
