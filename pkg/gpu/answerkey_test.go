package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestAnswerKey: a policy's answer key changes when the typical pods a
// window learns change (with the fleet's census: TestPairFitFleetChange),
// and policies that read nothing beyond the node have the zero key.
func TestAnswerKey(t *testing.T) {
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.5}, {Demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"T4"}}, Weight: 0.5}}
	// A window recomputes its typical pods every 64 observations; PairFit
	// without a fleet prices them alone.
	window := gpu.NewShapeWindow(100, shapes)
	learner := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: window})
	before := learner.AnswerKey()
	if again := learner.AnswerKey(); again != before {
		t.Fatalf("the key changed with nothing else: %v, then %v", before, again)
	}
	for range 64 {
		window.Observe(gpu.Demand{Count: 2, Milli: 1000})
	}
	if learner.AnswerKey() == before {
		t.Error("the window's typical pods changed and the key stayed")
	}

	for _, policy := range []gpu.PolicyType{gpu.PolicyBestFit, gpu.PolicySpread, gpu.PolicyRandom} {
		if k := gpu.MustPolicy(policy, gpu.PolicyConfig{Fleet: fleetOf(twoT4TwoA100)}).AnswerKey(); k != (gpu.AnswerKey{}) {
			t.Errorf("%s: key %v, want the zero key", policy, k)
		}
	}
}
