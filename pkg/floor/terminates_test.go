package floor

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// randomArrivals is a small random workload of shares and whole GPUs with
// varied CPU and memory, drawn from seed.
func randomArrivals(seed uint64) ([]arrivedPod, int64) {
	sizes := []int64{50, 100, 110, 140, 160, 200, 220, 230, 250, 270, 290, 300, 320, 330, 350, 370, 400, 440, 460, 470, 480, 500, 550, 590, 600, 650, 700, 750, 810, 900, 1000}
	rng := rand.New(rand.NewPCG(seed, 1))
	gpus := int64(1 + rng.IntN(12))
	var pods []arrivedPod
	for range 1 + rng.IntN(40) {
		s := sizes[rng.IntN(len(sizes))]
		d := gpu.Demand{Count: 1, Milli: s}
		if s == gpu.MilliPerGPU {
			d.Count = 1 + rng.IntN(3)
		}
		pods = append(pods, arrivedPod{demand: d, milliCPU: int64(1000 * (1 + rng.IntN(12))), memoryMiB: int64(1024 * (1 + rng.IntN(40)))})
	}
	return pods, gpus
}

// TestPackingLPTerminates: the floors' LPs end on degenerate workloads.
// Workload 1993 once made a simplex cycle (master.solve turns to Bland's
// rule when the objective stalls); a few hundred more are solved beside it,
// each within a generous limit.
func TestPackingLPTerminates(t *testing.T) {
	seeds := []uint64{1993}
	for s := range uint64(200) {
		seeds = append(seeds, 7000+s)
	}
	for _, seed := range seeds {
		pods, gpus := randomArrivals(seed)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, cert, err := lpPackingBound(demandsOf(pods), oneModel(gpus))
			if err != nil {
				t.Errorf("workload %d: %v", seed, err)
				return
			}
			// Each case of the online bound is the LP with more constraints.
			if b := onlineAllocationBound(pods, oneModel(gpus)); b > cert.AllocatedMilli+1e-3 {
				t.Errorf("workload %d: online bound %v above the bound for any placement %v", seed, b, cert.AllocatedMilli)
			}
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("workload %d: the packing LPs did not end within 30 s", seed)
		}
	}
}

// TestModelFloorsTighten: on random workloads whose pods are limited to
// GPU models at random, the LP that counts the models bounds the
// allocation at most as high as the LP that ignores them (the models only
// take packings away), and the online bound stays under the bound for any
// placement.
func TestModelFloorsTighten(t *testing.T) {
	names := []string{"A", "B", "C"}
	for seed := range uint64(100) {
		pods, gpus := randomArrivals(9000 + seed)
		rng := rand.New(rand.NewPCG(seed, 2))
		// The GPUs split at random among the models, C holding the rest.
		a := int64(rng.IntN(int(gpus) + 1))
		b := int64(rng.IntN(int(gpus-a) + 1))
		models := gpu.ModelGPUs{{Model: "A", GPUs: a}, {Model: "B", GPUs: b}, {Model: "C", GPUs: gpus - a - b}}
		unlimited := slices.Clone(pods)
		for i := range pods {
			if rng.IntN(3) == 0 {
				pods[i].demand.Models = []string{names[rng.IntN(len(names))]}
			}
		}
		_, blind, err := lpPackingBound(demandsOf(unlimited), oneModel(gpus))
		if err != nil {
			t.Fatalf("workload %d: %v", seed, err)
		}
		items, aware, err := lpPackingBound(demandsOf(pods), models)
		if err != nil {
			t.Fatalf("workload %d (%v on %v): %v", seed, items.Labels, models, err)
		}
		if aware.AllocatedMilli > blind.AllocatedMilli+1e-3 {
			t.Errorf("workload %d: counting the models raised the bound from %v to %v (%v)", seed, blind.AllocatedMilli, aware.AllocatedMilli, items.Labels)
		}
		if b := onlineAllocationBound(pods, models); b > aware.AllocatedMilli+1e-3 {
			t.Errorf("workload %d: online bound %v above the bound for any placement %v", seed, b, aware.AllocatedMilli)
		}
	}
}
