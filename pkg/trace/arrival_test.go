package trace

import (
	"slices"
	"testing"
)

// TestFGDSequence: a seed fixes the order and the top-up; another seed
// changes the order; the top-up stops within 1.3 × capacity.
func TestFGDSequence(t *testing.T) {
	_, pods := Synthetic(SyntheticOptions{Nodes: 20, Load: 0.8})
	capacity := CapacityMilli(mustNodes(Synthetic(SyntheticOptions{Nodes: 20})))
	a, b := FGDSequence(pods, 42, capacity), FGDSequence(pods, 42, capacity)
	if !slices.EqualFunc(a, b, func(x, y Pod) bool { return x.Pod.Name == y.Pod.Name }) {
		t.Fatal("two sequences with seed 42 differ")
	}
	c := FGDSequence(pods, 43, capacity)
	if slices.EqualFunc(a[:len(pods)], c[:len(pods)], func(x, y Pod) bool { return x.Pod.Name == y.Pod.Name }) {
		t.Error("seeds 42 and 43 give the same order")
	}
	// The originals come first, each once; then the samples.
	names := map[string]bool{}
	for _, p := range a[:len(pods)] {
		names[p.Pod.Name] = true
	}
	if len(names) != len(pods) {
		t.Errorf("%d distinct originals in the first %d, want all", len(names), len(pods))
	}
	var requested int64
	for _, p := range a {
		requested += DemandMilli(p)
	}
	limit := int64(TopUpFactor * float64(capacity))
	if len(a) == len(pods) || requested > limit+8000 || requested < limit-8000 {
		t.Errorf("topped up to %d pods, %d milli-GPU; want samples up to about %d", len(a), requested, limit)
	}
}

func mustNodes[T any](nodes T, _ []Pod) T { return nodes }
