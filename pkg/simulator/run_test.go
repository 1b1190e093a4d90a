package simulator

import (
	"context"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

func defaultProfiles(t testing.TB, policies ...string) []Profile {
	t.Helper()
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := ProfilesFor(cfg, policies)
	if err != nil {
		t.Fatal(err)
	}
	return profiles
}

// TestCurve runs a hand-made cluster and workload through the scheduler and
// checks the allocation and fragmentation curve, worked out below.
//
// One node, 2 GPUs (capacity 2000 milli-GPU), 8 CPUs. Pods, each with 1 CPU,
// in replay order:
//
//	t=0 p1 1 GPU       → GPU 0; arrived 1000 (50%),  used 1000 → 50%
//	t=1 p2 500 milli   → GPU 1; arrived 1500 (75%),  used 1500 → 75%
//	t=2 p3 1 GPU       → fails (GPU 1 is shared); arrived 2500 (125%), 75%
//	t=3 p1 leaves      → used 500
//	t=4 p4 300 milli   → GPU 1, the tightest fit; arrived 2800 (140%), used 800 → 40%
//
// Typical pods (all four cover 100%): whole GPU ½, 500 milli ¼, 300 milli ¼.
// Fragmented milli-GPU after each arrival:
//
//	p1: GPU 1 free 1000 fits all                      → 0
//	p2: GPU 0 full, GPU 1 has 500: the whole-GPU pod
//	    cannot use it: ½·500                          → 250 (12.5%)
//	p3: unchanged                                     → 250 (12.5%)
//	p4: GPU 0 free 1000, GPU 1 free 200: too small for
//	    every typical pod: ½·200 + ¼·200 + ¼·200        → 200 (10%)
func TestCurve(t *testing.T) {
	nodes := []*v1.Node{trace.NewNode("n0", 8000, 65536, 2, "T4")}
	pods := []trace.Pod{
		{Pod: trace.NewPod("p1", 1000, 1024, 1, 1000, nil), Created: 0, Deleted: 3, HasTimes: true},
		{Pod: trace.NewPod("p2", 1000, 1024, 1, 500, nil), Created: 1, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: trace.NewPod("p3", 1000, 1024, 1, 1000, nil), Created: 2, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: trace.NewPod("p4", 1000, 1024, 1, 300, nil), Created: 4, Deleted: trace.NeverDeleted, HasTimes: true},
	}
	runs, err := Simulate(context.Background(), Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "BestFit"),
		Seeds: []int64{1}, Arrival: trace.ArrivalReplay})
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	want := []report.Point{
		{ArrivedPct: 50, AllocatedPct: 50, FragmentedPct: 0, Events: 1},
		{ArrivedPct: 75, AllocatedPct: 75, FragmentedPct: 12.5, Events: 1},
		{ArrivedPct: 125, AllocatedPct: 75, FragmentedPct: 12.5, Events: 1},
		{ArrivedPct: 140, AllocatedPct: 40, FragmentedPct: 10, Events: 1},
	}
	if !reflect.DeepEqual(r.Curve, want) {
		t.Errorf("curve\n  %+v\nwant\n  %+v", r.Curve, want)
	}
	if r.Submitted != 4 || r.Placed != 3 || r.Failed != 1 || r.FailedGPUMilli != 1000 {
		t.Errorf("submitted %d, placed %d, failed %d (%d milli-GPU); want 4, 3, 1 (1000)", r.Submitted, r.Placed, r.Failed, r.FailedGPUMilli)
	}
	// No event fell in buckets 99..101: no headline number.
	if r.UnallocatedPctAt100 != nil {
		t.Errorf("unallocated at 100%% = %v, want none", *r.UnallocatedPctAt100)
	}
	if len(r.ByModel) != 1 || r.ByModel[0].Model != "T4" || r.ByModel[0].AllocatedPct != 40 {
		t.Errorf("by model = %+v, want T4 at 40%%", r.ByModel)
	}
}

// TestRunsReproducible: the same seed gives the same run, in parallel or not.
func TestRunsReproducible(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 30})
	opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "BestFit", "Random"), Seeds: []int64{7, 7}, Arrival: trace.ArrivalFGD}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Parallel = 1
	again, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		if !reflect.DeepEqual(runs[i].Curve, again[i].Curve) || !reflect.DeepEqual(runs[i].Curve, runs[i-i%2].Curve) {
			t.Errorf("run %d (%s, seed %d) differs between repetitions", i, runs[i].Policy, runs[i].Seed)
		}
	}
}

// TestScreenChangesNothing: skipping the Filter plugins on nodes the GPU
// screen rejects gives the same placements as filtering every node. (Only
// the failure messages may differ: a node short of both CPU and GPUs is
// counted under its GPU reason when screened, under the first failing
// plugin's reason when filtered.)
func TestScreenChangesNothing(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 40, Seed: 3})
	for _, dra := range []bool{false, true} {
		opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "BestFit", "GpuPacking", "DotProd"), Seeds: []int64{1},
			Arrival: trace.ArrivalFGD, DRA: dra, RecordPlacements: dra}
		screened, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.NoScreen = true
		full, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range full {
			if !reflect.DeepEqual(screened[i].Curve, full[i].Curve) || screened[i].Failed != full[i].Failed {
				t.Errorf("%s, DRA %v: the screen changed the run: failed %d vs %d", full[i].Policy, dra, screened[i].Failed, full[i].Failed)
			}
			if !reflect.DeepEqual(screened[i].ByModel, full[i].ByModel) {
				t.Errorf("%s, DRA %v: allocation by model differs: %v vs %v", full[i].Policy, dra, screened[i].ByModel, full[i].ByModel)
			}
			for j, p := range full[i].Placements {
				if q := screened[i].Placements[j]; q.Pod != p.Pod || q.Node != p.Node || !slices.Equal(q.GPUs, p.GPUs) {
					t.Errorf("%s, DRA %v: pod %s placed on %s %v screened, on %s %v filtered", full[i].Policy, dra, p.Pod, q.Node, q.GPUs, p.Node, p.GPUs)
					break
				}
			}
		}
	}
}

// TestSharesAsResourcesPlaceAlike: the same workload with its shares asked
// for by the quota-counted gpusched.io/gpu-milli resource (--shares
// resources) is placed exactly as with the annotation: the same node and
// GPUs for every pod, under PairFit and FGD. It fails if any part of the
// scheduler (GPUResourcesFit, GPUPlacement, the screen) reads only one form.
func TestSharesAsResourcesPlaceAlike(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 30, Seed: 5})
	asResources := make([]trace.Pod, len(pods))
	shares := 0
	for i, tp := range pods {
		asResources[i] = tp
		asResources[i].Pod = tp.Pod.DeepCopy()
	}
	trace.SharesAsResources(asResources)
	for _, tp := range asResources {
		if q, ok := tp.Pod.Spec.Containers[0].Resources.Limits[gpu.ResourceMilli]; ok {
			shares++
			if _, still := tp.Pod.Annotations[gpu.AnnotationMilli]; still || q.Value() < 1 || q.Value() > 999 {
				t.Fatalf("pod %s: share rewritten as %v with annotations %v", tp.Pod.Name, q.String(), tp.Pod.Annotations)
			}
		}
	}
	if shares == 0 {
		t.Fatal("the workload has no shares; the comparison proves nothing")
	}
	opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "PairFit", "FGD"), Seeds: []int64{3}, Arrival: trace.ArrivalFGD, RecordPlacements: true}
	byAnnotation, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Pods = asResources
	byResource, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range byAnnotation {
		a, r := byAnnotation[i], byResource[i]
		if a.Failed != r.Failed || !reflect.DeepEqual(a.Placements, r.Placements) {
			for j := range min(len(a.Placements), len(r.Placements)) {
				if !reflect.DeepEqual(a.Placements[j], r.Placements[j]) {
					t.Fatalf("%s: first difference at pod %d: by annotation %+v, by resource %+v", a.Policy, j, a.Placements[j], r.Placements[j])
				}
			}
			t.Fatalf("%s: failed %d by annotation, %d by resource", a.Policy, a.Failed, r.Failed)
		}
	}
	t.Logf("%d of %d pods ask for shares; placements equal under %d policies", shares, len(pods), len(byAnnotation))
}
