package simulator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestDRAPathNeverGivesAGPUTwice runs a synthetic workload on the DRA path
// and checks every placement against the cluster: each GPU pod got as many
// devices as it asked for, each device of an allowed model, the share it
// asked for of each, and no device more than its whole across pods.
func TestDRAPathNeverGivesAGPUTwice(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 30, Seed: 5})
	opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "FragFit"), Seeds: []int64{3},
		Arrival: trace.ArrivalFGD, RecordPlacements: true, DRA: true}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	run := runs[0]
	byName := map[string]trace.Pod{}
	for _, p := range trace.FGDSequence(pods, 3, trace.CapacityMilli(nodes)) {
		byName[p.Pod.Name] = p
	}
	model := map[string]string{}
	for _, n := range nodes {
		model[n.Name] = n.Labels[gpu.LabelProduct]
	}
	used := map[string]int64{} // node/device → milli-GPU
	var gpuPods int
	for _, pl := range run.Placements {
		if pl.Node == "" {
			continue
		}
		d, err := gpu.DemandFromPod(byName[pl.Pod].Pod)
		if err != nil {
			t.Fatal(err)
		}
		if d.IsZero() {
			if len(pl.GPUs) > 0 {
				t.Errorf("pod %s asks for no GPU and holds %v", pl.Pod, pl.GPUs)
			}
			continue
		}
		gpuPods++
		if len(pl.GPUs) != d.Count {
			t.Errorf("pod %s asks for %d GPUs and holds %v", pl.Pod, d.Count, pl.GPUs)
		}
		if !d.AllowsModel(model[pl.Node]) {
			t.Errorf("pod %s allows models %v and holds GPUs of %s on %s", pl.Pod, d.Models, model[pl.Node], pl.Node)
		}
		for _, i := range pl.GPUs {
			used[fmt.Sprintf("%s/%d", pl.Node, i)] += d.Milli
		}
	}
	for dev, milli := range used {
		if milli > gpu.MilliPerGPU {
			t.Errorf("GPU %s given %d milli-GPU", dev, milli)
		}
	}
	if gpuPods == 0 || run.UnallocatedPctAt100 == nil {
		t.Fatalf("the DRA path placed %d GPU pods and reached arrived 100%%: %v", gpuPods, run.UnallocatedPctAt100 != nil)
	}
}

// TestDRAClaimsReleasedOnDeparture: on the DRA path a departed pod's claim
// is deallocated, so the GPU it held goes to the next pod. One node, one
// GPU; pod a holds it from 0 to 10, pod b arrives at 10.
func TestDRAClaimsReleasedOnDeparture(t *testing.T) {
	nodes := []*v1.Node{trace.NewNode("n", 8000, 32768, 1, "A100")}
	pods := []trace.Pod{
		{Pod: trace.NewPod("a", 1000, 1024, 1, 1000, nil), Created: 0, Deleted: 10, HasTimes: true},
		{Pod: trace.NewPod("b", 1000, 1024, 1, 1000, nil), Created: 10, Deleted: trace.NeverDeleted, HasTimes: true},
	}
	opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "FragFit"), Seeds: []int64{1},
		Arrival: trace.ArrivalReplay, RecordPlacements: true, DRA: true}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range runs[0].Placements {
		if pl.Node != "n" || len(pl.GPUs) != 1 || pl.GPUs[0] != 0 {
			t.Errorf("pod %s: node %q GPUs %v (%s), want GPU 0 of n", pl.Pod, pl.Node, pl.GPUs, pl.Reason)
		}
	}
	opts.Pods[0].Deleted = trace.NeverDeleted // a never departs: b finds no GPU
	runs, err = Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if b := runs[0].Placements[1]; b.Node != "" {
		t.Errorf("pod b placed on %s GPUs %v while a holds the only GPU", b.Node, b.GPUs)
	}
}

// TestDRAPod: a trace pod's GPU request becomes one claim, and the pod
// loses the request and references the claim.
func TestDRAPod(t *testing.T) {
	tests := []struct {
		name      string
		count     int
		milli     int64
		models    []string
		wantCount int64
		// wantMemory is milli × draMiBPerMilli MiB: 1000 × 16 for a whole GPU.
		wantMemory string
		wantCEL    string
	}{
		{name: "two whole GPUs", count: 2, milli: 1000, wantCount: 2, wantMemory: "16000Mi"},
		{name: "a share: 300 × 16 MiB", count: 1, milli: 300, wantCount: 1, wantMemory: "4800Mi"},
		{name: "models", count: 1, milli: 1000, models: []string{"V100", "A100"}, wantCount: 1, wantMemory: "16000Mi",
			wantCEL: `device.attributes['gpu.nvidia.com'].productName in ["V100", "A100"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, claim, err := draPod(trace.NewPod("p", 1000, 1024, tt.count, tt.milli, tt.models))
			if err != nil {
				t.Fatal(err)
			}
			if d, err := gpu.DemandFromPod(pod); err != nil || !d.IsZero() {
				t.Errorf("the claim pod still asks gpusched for GPUs: %+v %v", d, err)
			}
			if len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimName != claim.Name {
				t.Errorf("pod claims %+v, want %s", pod.Spec.ResourceClaims, claim.Name)
			}
			req := claim.Spec.Devices.Requests[0].Exactly
			mem := req.Capacity.Requests["memory"]
			if req.Count != tt.wantCount || mem.Cmp(resource.MustParse(tt.wantMemory)) != 0 {
				t.Errorf("claim asks for %d devices with %s memory, want %d with %s", req.Count, mem.String(), tt.wantCount, tt.wantMemory)
			}
			var cel string
			if len(req.Selectors) > 0 {
				cel = req.Selectors[0].CEL.Expression
			}
			if cel != tt.wantCEL {
				t.Errorf("selector %q, want %q", cel, tt.wantCEL)
			}
		})
	}
	pod := trace.NewPod("cpu", 1000, 1024, 0, 0, nil)
	if got, claim, err := draPod(pod); err != nil || claim != nil || got != pod {
		t.Errorf("a pod without GPUs: %v %v %v, want itself and no claim", got, claim, err)
	}
	bad := trace.NewPod("bad", 1000, 1024, 1, 1000, nil)
	bad.Annotations = map[string]string{gpu.AnnotationMilli: "lots"}
	if _, _, err := draPod(bad); err == nil || !strings.Contains(err.Error(), gpu.AnnotationMilli) {
		t.Errorf("a malformed request: error %v, want one naming %s", err, gpu.AnnotationMilli)
	}
}

// TestDRAAssignment: an allocation read back as the GPUs it gives.
func TestDRAAssignment(t *testing.T) {
	result := func(dev string, memory string, shared bool) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: draRequest, Driver: gpu.DefaultDRADriver, Pool: "n", Device: dev}
		if memory != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		}
		if shared {
			r.ShareID = ptr.To[types.UID]("s")
		}
		return r
	}
	alloc := func(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	tests := []struct {
		name    string
		alloc   *resourceapi.AllocationResult
		want    gpu.Assignment
		wantErr string
	}{
		{name: "whole GPUs: 16000 MiB / 16 = 1000", alloc: alloc(result("gpu-3", "16000Mi", true), result("gpu-1", "16000Mi", true)),
			want: gpu.Assignment{Devices: []int{3, 1}, Milli: 1000}},
		{name: "a share: 4800 MiB / 16 = 300", alloc: alloc(result("gpu-0", "4800Mi", true)), want: gpu.Assignment{Devices: []int{0}, Milli: 300}},
		{name: "an exclusive device without consumed capacity", alloc: alloc(result("gpu-2", "", false)), want: gpu.Assignment{Devices: []int{2}, Milli: 1000}},
		{name: "a device not named by index", alloc: alloc(result("mig-1", "", false)), wantErr: `"mig-1"`},
		{name: "unequal shares", alloc: alloc(result("gpu-0", "4800Mi", true), result("gpu-1", "16000Mi", true)), wantErr: "300 and 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := draAssignment(tt.alloc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one with %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got.Devices) != fmt.Sprint(tt.want.Devices) || got.Milli != tt.want.Milli {
				t.Errorf("got %+v %v, want %+v", got, err, tt.want)
			}
		})
	}
}

// TestDRAPathPlacesAsTheAnnotationPath: with GPUDynamicResources, the
// claims of the DRA path get the GPUs the policy chooses, so every pod
// lands where the annotation path places it, on the same GPUs; with
// DynamicResources' first fit (DRAFirstFit) they do not. The same holds
// when a fifth of the GPU pods may use only some GPU models: PairFit then
// prices the models by the cluster's GPUs of each, which on the DRA path
// only the slices publish (draFleet).
func TestDRAPathPlacesAsTheAnnotationPath(t *testing.T) {
	// Seed 8: a workload on which first fit places some pods where the
	// policy would not (4.44 % unallocated against 4.29), so that the case
	// tells the two apart.
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 30, Seed: 8})
	limited := make([]trace.Pod, len(pods))
	gpuPods := 0
	for i, tp := range pods {
		limited[i] = tp
		d, err := gpu.DemandFromPod(tp.Pod)
		if err != nil || d.IsZero() {
			continue
		}
		if gpuPods++; gpuPods%5 != 0 {
			continue
		}
		pod := tp.Pod.DeepCopy()
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		// Models with nodes of enough GPUs for the pod: 2-GPU T4 and P100
		// nodes, 8-GPU G2 nodes.
		pod.Annotations[gpu.AnnotationModels] = map[bool]string{true: "T4,P100", false: "G2"}[d.Count <= 2]
		limited[i].Pod = pod
	}
	run := func(pods []trace.Pod, dra, firstFit bool) report.Run {
		opts := Options{Nodes: nodes, Pods: pods, Profiles: defaultProfiles(t, "PairFit"), Seeds: []int64{3},
			Arrival: trace.ArrivalFGD, RecordPlacements: true, DRA: dra, DRAFirstFit: firstFit}
		runs, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return runs[0]
	}
	for _, tt := range []struct {
		name string
		pods []trace.Pod
	}{{"any model", pods}, {"a fifth limited to models", limited}} {
		t.Run(tt.name, func(t *testing.T) {
			annotation, policy := run(tt.pods, false, false), run(tt.pods, true, false)
			if len(annotation.Placements) == 0 {
				t.Fatal("no placement on the annotation path")
			}
			if n, first := differentPlacements(t, annotation, policy); n > 0 {
				t.Errorf("%d of %d pods placed differently on the DRA path, first %s", n, len(annotation.Placements), first)
			}
			if tt.name != "any model" {
				return
			}
			firstFit := run(tt.pods, true, true)
			if n, _ := differentPlacements(t, annotation, firstFit); n == 0 {
				t.Errorf("DynamicResources' first fit placed every pod as the policy does: the case does not tell the two apart")
			}
			t.Logf("unallocated at 100%%: annotation %v, DRA with the policy's devices %v, DRA first fit %v",
				*annotation.UnallocatedPctAt100, *policy.UnallocatedPctAt100, *firstFit.UnallocatedPctAt100)
		})
	}
}

// TestDRAAllocatedStateKeptUpToDate: the manager's allocated state, kept up
// to date as claims become pending, allocated, unreserved and released,
// equals the state counted afresh from its claims after every step. Node n
// has gpu-0..gpu-1; a takes gpu-0 whole, b and c share gpu-1 (4800 + 3200
// MiB = 8000 MiB consumed), d is reserved on gpu-1 and unreserved.
func TestDRAAllocatedStateKeptUpToDate(t *testing.T) {
	m := newDRAManager([]*resourceapi.ResourceSlice{draSlice("n", 2, "A100")})
	pod := func(name string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: draRequest, ResourceClaimName: ptr.To(name)}}
		m.add(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-claim")}})
		return p
	}
	reserve := func(p *v1.Pod, dev, memory string) {
		r := resourceapi.DeviceRequestAllocationResult{Request: draRequest, Driver: gpu.DefaultDRADriver, Pool: "n", Device: dev}
		if memory != "" {
			r.ShareID = ptr.To(types.UID(p.Name + "-share"))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		}
		claim, _ := m.ResourceClaims().Get(p.Namespace, p.Name)
		allocated := claim.DeepCopy()
		allocated.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}
		if err := m.ResourceClaims().SignalClaimPendingAllocation(claim.UID, allocated); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(p *v1.Pod) {
		if _, err := m.commit(p); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, wantWhole, wantShares int, wantMemory string) {
		t.Helper()
		got, _ := m.ResourceClaims().GatherAllocatedState()
		want := recountAllocatedState(m)
		if !got.AllocatedDevices.Equal(want.AllocatedDevices) ||
			!got.AllocatedSharedDeviceIDs.Equal(want.AllocatedSharedDeviceIDs) || fmt.Sprint(got.AggregatedCapacity) != fmt.Sprint(want.AggregatedCapacity) {
			t.Errorf("%s: state %v, counted afresh %v", step, got, want)
		}
		if got.AllocatedDevices.Len() != wantWhole || got.AllocatedSharedDeviceIDs.Len() != wantShares {
			t.Errorf("%s: %d whole devices and %d shares, want %d and %d", step, got.AllocatedDevices.Len(), got.AllocatedSharedDeviceIDs.Len(), wantWhole, wantShares)
		}
		memory := ""
		if q := got.AggregatedCapacity[structured.MakeDeviceID(gpu.DefaultDRADriver, "n", "gpu-1")]["memory"]; q != nil {
			memory = q.String()
		}
		if memory != wantMemory {
			t.Errorf("%s: gpu-1 has %q of memory consumed, want %q", step, memory, wantMemory)
		}
	}
	a, b, c, d := pod("a"), pod("b"), pod("c"), pod("d")
	check("no claim allocated", 0, 0, "")
	reserve(a, "gpu-0", "")
	check("a pending", 1, 0, "")
	commit(a)
	reserve(b, "gpu-1", "4800Mi")
	commit(b)
	reserve(c, "gpu-1", "3200Mi")
	check("b allocated, c pending", 1, 2, "8000Mi")
	commit(c)
	reserve(d, "gpu-1", "1600Mi")
	check("d pending", 1, 3, "9600Mi")
	m.ResourceClaims().MaybeRemoveClaimPendingAllocation(types.UID("d-claim"), false)
	check("d unreserved", 1, 2, "8000Mi")
	m.release(b)
	check("b released", 1, 1, "3200Mi")
	m.release(a)
	m.release(c)
	check("all released", 0, 0, "")
}

// recountAllocatedState is the manager's allocated state counted afresh
// from its allocated and pending claims.
func recountAllocatedState(m *draManager) *structured.AllocatedState {
	fresh := newDRAManager(nil)
	for _, claim := range m.claims {
		fresh.count(claim.Status.Allocation, true)
	}
	for _, claim := range m.pending {
		fresh.count(claim.Status.Allocation, true)
	}
	return fresh.state
}

// TestDRAScreenChecksWhatTheClaimAsks: the DRA path's screen checks the
// claim draPod writes, not the whole trace pod: a GPU memory minimum, which
// the claim does not carry, does not keep a pod off a node whose GPUs have
// no memory label (the annotation path's check would reject it there), so
// the pod is placed with the screen as without it.
func TestDRAScreenChecksWhatTheClaimAsks(t *testing.T) {
	nodes := []*v1.Node{trace.NewNode("n", 8000, 32768, 1, "A100")}
	pod := trace.NewPod("p", 1000, 1024, 1, 1000, nil)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[gpu.AnnotationMemory] = "40960"
	for _, noScreen := range []bool{true, false} {
		opts := Options{Nodes: nodes, Pods: []trace.Pod{{Pod: pod, Created: 0, Deleted: trace.NeverDeleted, HasTimes: true}},
			Profiles: defaultProfiles(t, "FragFit"), Seeds: []int64{1}, Arrival: trace.ArrivalReplay, RecordPlacements: true, DRA: true, NoScreen: noScreen}
		runs, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if pl := runs[0].Placements[0]; pl.Node != "n" {
			t.Errorf("screen off %v: pod placed on %q (%s), want n", noScreen, pl.Node, pl.Reason)
		}
	}
}
