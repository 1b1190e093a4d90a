package gpu_test

import (
	"sync/atomic"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// fleet is a census a test sets (gpu.Fleet).
type fleet struct{ census atomic.Pointer[gpu.ModelGPUs] }

func fleetOf(census gpu.ModelGPUs) *fleet {
	f := &fleet{}
	f.census.Store(&census)
	return f
}

func (f *fleet) GPUsByModel() gpu.ModelGPUs { return *f.census.Load() }

// twoT4TwoA100 is a fleet of two GPUs of each model.
var twoT4TwoA100 = gpu.ModelGPUs{{Model: "A100", GPUs: 2}, {Model: "T4", GPUs: 2}}

// TestPairFitModelPrices: a pod pays, on a GPU of a model that
// model-limited typical pods would find full, the class's pressure on each
// milli-GPU it takes; a pod limited to the model pays the same on every
// node it may use; a model with GPUs to spare costs nothing more.
//
// The fleet has 2 A100s and 2 T4s; each node below has 2 idle GPUs of one
// model. The LP is given just enough GPUs for the typical items, shared
// between the models as the fleet shares them. The pressure of the T4s
// is 1 − C / (D + U × C / all), with C the T4s' milli-GPU, D the T4
// items', U the items' of any model. A loss is
// before + pressure × milli − weight − after.
func TestPairFitModelPrices(t *testing.T) {
	whole := func(models ...string) gpu.Demand { return gpu.Demand{Count: 1, Milli: 1000, Models: models} }
	share := func(milli int64, models ...string) gpu.Demand {
		return gpu.Demand{Count: 1, Milli: milli, Models: models}
	}
	t4 := nodeWithPods(t, gt.MakeGPUNode("t4").GFD("T4", 2, 0))
	a100 := nodeWithPods(t, gt.MakeGPUNode("a100").GFD("A100", 2, 0))
	halfOnT4 := gpu.StaticShapes{{Demand: whole(), Weight: 0.5}, {Demand: whole("T4"), Weight: 0.5}}
	sixtyOnT4 := gpu.StaticShapes{{Demand: whole(), Weight: 0.4}, {Demand: whole("T4"), Weight: 0.6}}
	quarterOnT4 := gpu.StaticShapes{{Demand: whole(), Weight: 0.75}, {Demand: whole("T4"), Weight: 0.25}}
	sharesBeside := gpu.StaticShapes{{Demand: share(500), Weight: 0.5}, {Demand: whole("T4"), Weight: 0.5}}
	tests := []struct {
		name   string
		shapes gpu.StaticShapes
		fleet  gpu.Fleet
		node   *gpu.NodeGPUs
		demand gpu.Demand
		want   int64
	}{
		// Items 500 of any model, 500 on T4: 1000 GPUs, 500 per model,
		// every one used: whole GPUs weigh 1000. The T4s get their 500
		// items and 500 × 500/1000 of the others: pressure
		// 1 − 500/750 = 1/3. 2000 + 1000/3 − 1000 − 1000 = 333.
		{"any model on a T4 the T4 pods need", halfOnT4, fleetOf(twoT4TwoA100), t4, whole(), 333},
		// The A100s get 250 of 500: pressure 0. 2000 + 0 − 1000 − 1000.
		{"any model on an A100", halfOnT4, fleetOf(twoT4TwoA100), a100, whole(), 0},
		// The T4 pod pays the same wherever it may go: the T4s.
		{"a T4 pod on a T4", halfOnT4, fleetOf(twoT4TwoA100), t4, whole("T4"), 333},
		// 600 T4 items and 400 others: 1 − 500/(600 + 200) = 0.375, and
		// a T4's room is worth a T4 item, 1000. The 400 items of any
		// model leave 100 of the 500 A100s idle: the LP weighs them 0.
		// 2000 + 375 − 0 − 1000.
		{"more T4 pods than T4s", sixtyOnT4, fleetOf(twoT4TwoA100), t4, whole(), 1375},
		// 250 T4 items and 750 others: 1 − 500/(250 + 375) = 0.2.
		// 2000 + 200 − 1000 − 1000.
		{"a quarter on T4", quarterOnT4, fleetOf(twoT4TwoA100), t4, whole(), 200},
		// Without a fleet the models are not known: no pressure.
		{"no fleet", halfOnT4, nil, t4, whole(), 0},
		// 500 shares and 500 whole T4s: 750 GPUs, 375 per model; the T4s
		// get 500 and 250 × 375/750 of the shares' milli-GPU:
		// 1 − 375/625 = 0.4. A T4 holds one T4 item, worth 1000; the
		// shares need 250 of the 375 A100s, so the LP weighs them 0. A
		// share of 500 on an idle T4: 2000 + 0.4 × 500 − 0 − (0 + 1000).
		{"a share on a T4", sharesBeside, fleetOf(twoT4TwoA100), t4, share(500), 1200},
		// An A100's room holds only shares: 0 + 0 − 0 − 0.
		{"a share on an A100", sharesBeside, fleetOf(twoT4TwoA100), a100, share(500), 0},
	}
	for _, tt := range tests {
		p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: tt.shapes, Fleet: tt.fleet})
		req := gpu.Request{Demand: &tt.demand, Host: knownHost(64000)}
		chosen, fit := p.Place(tt.node, &req)
		if !fit.OK() {
			t.Fatalf("%s: %v", tt.name, fit.Reasons)
		}
		if s := p.Score(tt.node, &req, chosen); pairFitFieldsOf(s).loss != tt.want {
			t.Errorf("%s: %s, want loss %d", tt.name, pairFitParts(s), tt.want)
		}
	}
}

// TestPairFitFleetChange: answers remembered with a node's view
// (PlaceAndScore) are dropped when the fleet's census changes, since the
// prices depend on it. With 998 T4s the T4s get 500 T4 items and 499 of
// the others: pressure 1 − 998/999, and a pod of any model loses
// 2000 + 1 − 1000 − 1000 = 1 there (333 before: TestPairFitModelPrices).
// The policy's answer key (gpu.AnswerKey), by which front ends keep
// answers outside the engine, stays while nothing changes and changes with
// the census.
func TestPairFitFleetChange(t *testing.T) {
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.5}, {Demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"T4"}}, Weight: 0.5}}
	f := fleetOf(twoT4TwoA100)
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes, Fleet: f})
	t4 := nodeWithPods(t, gt.MakeGPUNode("t4").GFD("T4", 2, 0))
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}, Host: knownHost(64000)}
	key := p.AnswerKey()
	if _, _, s := p.PlaceAndScore(t4, &req); pairFitFieldsOf(s).loss != 333 {
		t.Fatalf("before: %s, want loss 333", pairFitParts(s))
	}
	if again := p.AnswerKey(); again != key {
		t.Fatalf("the answer key changed with nothing else: %v, then %v", key, again)
	}
	more := gpu.ModelGPUs{{Model: "A100", GPUs: 2}, {Model: "T4", GPUs: 998}}
	f.census.Store(&more)
	if _, _, s := p.PlaceAndScore(t4, &req); pairFitFieldsOf(s).loss != 1 {
		t.Errorf("after the fleet grew: %s, want loss 1", pairFitParts(s))
	}
	if p.AnswerKey() == key {
		t.Errorf("the loss on the same node went from 333 to 1 and the answer key stayed %v", key)
	}
}

// TestPairFitChoosesAcrossModels: on a node with a T4 and an A100, a share
// of any model goes on the GPU of the model under less pressure when the
// two pair alike. Typical pods: whole GPUs, half of them T4-only (T4
// pressure 1/3, TestPairFitModelPrices). A 500 share weighs 0 (no typical
// size at or below it), so on either idle GPU its pairing loss is
// best[1000] − 0 − best[500] = 1000 − 0 − 0 = 1000; on the T4 it pays
// 500/3 = 167 more.
func TestPairFitChoosesAcrossModels(t *testing.T) {
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.5}, {Demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"T4"}}, Weight: 0.5}}
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes, Fleet: fleetOf(twoT4TwoA100)})
	mixed := nodeWithPods(t, gt.MakeGPUNode("mixed").Devices(gpu.Device{Index: 0, Model: "T4"}, gpu.Device{Index: 1, Model: "A100"}))
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 500}, Host: knownHost(64000)}
	chosen, fit := p.Place(mixed, &req)
	if !fit.OK() || chosen != 1<<1 {
		t.Errorf("the share went on GPUs %b (%v), want the A100 (GPU 1)", chosen, fit.Reasons)
	}
}
