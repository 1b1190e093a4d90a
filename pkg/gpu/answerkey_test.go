package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestAnswerKey: a policy's answer key stays equal while what its answers
// read beyond the node stays, and changes when the answers change for a
// node that did not: the fleet's census here (TestPairFitFleetChange:
// the same T4 node's loss goes from 333 to 1), and the typical pods a
// window learns. Policies that read nothing beyond the node have the zero
// key.
func TestAnswerKey(t *testing.T) {
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.5}, {Demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"T4"}}, Weight: 0.5}}
	f := fleetOf(twoT4TwoA100)
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes, Fleet: f})
	t4 := nodeWithPods(t, gt.MakeGPUNode("t4").GFD("T4", 2, 0))
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}, Host: knownHost(64000)}
	before := p.AnswerKey()
	_, _, s := p.PlaceAndScore(t4, &req)
	if again := p.AnswerKey(); again != before {
		t.Fatalf("the key changed with nothing else: %v, then %v", before, again)
	}
	more := gpu.ModelGPUs{{Model: "A100", GPUs: 2}, {Model: "T4", GPUs: 998}}
	f.census.Store(&more)
	_, _, after := p.PlaceAndScore(t4, &req)
	if after == s {
		t.Fatalf("the answer stayed %d when the census changed: the case tests nothing", s)
	}
	if p.AnswerKey() == before {
		t.Errorf("the answer on the same node went from %d to %d and the key stayed %v", s, after, before)
	}

	// The typical pods alone: a window that learns a new shape (64
	// observations recompute it) changes the key of a policy without a
	// fleet, whose prices follow the typical pods.
	window := gpu.NewShapeWindow(100, shapes)
	learner := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: window})
	before = learner.AnswerKey()
	for range 64 {
		window.Observe(gpu.Demand{Count: 2, Milli: 1000})
	}
	if learner.AnswerKey() == before {
		t.Error("the window's typical pods changed and the key stayed")
	}

	for _, policy := range []gpu.PolicyType{gpu.PolicyBestFit, gpu.PolicySpread, gpu.PolicyRandom} {
		if k := gpu.MustPolicy(policy, gpu.PolicyConfig{Fleet: f}).AnswerKey(); k != (gpu.AnswerKey{}) {
			t.Errorf("%s: key %v, want the zero key", policy, k)
		}
	}
}
