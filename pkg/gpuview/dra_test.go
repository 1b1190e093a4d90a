package gpuview_test

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

const h100 = "NVIDIA H100 80GB HBM3"

// draCluster: node dra publishes 4 H100s of 81559 MiB through NVIDIA's DRA
// driver (devices gpu-0..gpu-3 in pool dra) and has no GPU labels; node dp
// has 4 A100s of the device plugin. On dra, claim train-gpu holds gpu-0
// whole for pod train, and claim infer-gpu a 20Gi share of gpu-1 for pod
// infer; on dp, pod ann holds GPU 0 by annotation.
func draCluster() ([]*v1.Node, []*v1.Pod, *gpuview.DRA) {
	slice := gt.MakeNVIDIASlice("dra-slice", "dra")
	for i := range 4 {
		slice.GPU(i, "GPU-dra-"+string(rune('0'+i)), h100, 81559, "")
	}
	nodes := []*v1.Node{gt.MakeGPUNode("dra").Obj(), gt.MakeGPUNode("dp").GFD("A100", 4, 81920).Obj()}
	pods := []*v1.Pod{
		claimPod("train", "train-gpu", "dra"),
		claimPod("infer", "infer-gpu", "dra"),
		bound("ann", whole("dp", 0), 0),
	}
	claims := []*resourceapi.ResourceClaim{
		allocated(claimFor("train-gpu", 1, ""), pods[0], "gpu-0", ""),
		allocated(claimFor("infer-gpu", 1, "20Gi"), pods[1], "gpu-1", "20Gi"),
	}
	return nodes, pods, &gpuview.DRA{Slices: []*resourceapi.ResourceSlice{slice.Obj()}, Claims: claims}
}

// claimPod is a pod in namespace ml with one claim by name, bound to node
// when it is not "".
func claimPod(name, claim, node string) *v1.Pod {
	w := gt.MakeGPUPod(name).Namespace("ml").UID(name)
	if node != "" {
		w = w.Node(node)
	}
	p := w.Obj()
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	return p
}

// claimFor asks for count GPUs of NVIDIA's class, or memory of one.
func claimFor(name string, count int64, memory string) *resourceapi.ResourceClaim {
	r := &resourceapi.ExactDeviceRequest{DeviceClassName: gpu.DefaultDRADriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if memory != "" {
		r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{gpu.DRACapacityMemory: resource.MustParse(memory)}}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: r}}}}}
}

// allocated is the claim allocated device on node dra for pod, as a share
// consuming memory when memory is set.
func allocated(c *resourceapi.ResourceClaim, pod *v1.Pod, device, memory string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpu.DefaultDRADriver, Pool: "dra", Device: device}
	if memory != "" {
		r.ShareID = ptr.To(types.UID(c.Name + "-share"))
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{gpu.DRACapacityMemory: resource.MustParse(memory)}
	}
	c.Status = resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"dra"}}}}}},
		},
		ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}},
	}
	return c
}

// TestSnapshotOfDRAGPUs: a node that publishes GPUs through DRA shows the
// published GPUs, what the claims hold of them and the pods they hold
// them for; a pending pod's demand is its claim's.
func TestSnapshotOfDRAGPUs(t *testing.T) {
	nodes, pods, dra := draCluster()
	waiting := claimPod("wait", "wait-gpu", "")
	template := claimPod("new", "", "")
	template.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}
	nic := claimPod("nic", "nic-0", "")
	nicClaim := claimFor("nic-0", 1, "")
	nicClaim.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nic.example.com"
	// A class of another name whose selector names NVIDIA's driver.
	h := claimPod("h", "h-gpu", "")
	hClaim := claimFor("h-gpu", 1, "")
	hClaim.Spec.Devices.Requests[0].Exactly.DeviceClassName = "h100"
	pods = append(pods, waiting, template, nic, h)
	dra.Claims = append(dra.Claims, claimFor("wait-gpu", 2, ""), nicClaim, hClaim)
	class := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
	}
	dra.Classes = []*resourceapi.DeviceClass{
		class("nic.example.com", "device.driver == 'nic.example.com'"),
		class("h100", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"),
	}

	s := gpuview.Build(nodes, pods, gpuview.Options{DRA: dra})
	n, ok := s.Node("dra")
	if !ok || n.GPUCount != 4 || n.Model != "NVIDIA-H100-80GB-HBM3" {
		t.Fatalf("node dra: %+v, want its 4 published H100s", n)
	}
	// gpu-0 whole: 1000; gpu-1 20480 MiB of 81559: ⌈20480 × 1000 / 81559⌉
	// = ⌈251.1⌉ = 252.
	if n.GPUs[0].AllocatedMilli != 1000 || n.GPUs[1].AllocatedMilli != 252 || n.GPUs[1].AllocatedMemoryMiB != 20480 || n.AllocatedMilli != 1252 {
		t.Errorf("allocated %d, %d (%d MiB), node %d; want 1000, 252 (20480 MiB), 1252",
			n.GPUs[0].AllocatedMilli, n.GPUs[1].AllocatedMilli, n.GPUs[1].AllocatedMemoryMiB, n.AllocatedMilli)
	}
	if h := n.GPUs[0].Holders; len(h) != 1 || h[0].Name != "train" || h[0].Milli != 1000 {
		t.Errorf("gpu-0 holders %+v, want train (1000)", h)
	}
	if h := n.GPUs[1].Holders; len(h) != 1 || h[0].Name != "infer" || h[0].Milli != 252 || h[0].MemoryMiB != 20480 {
		t.Errorf("gpu-1 holders %+v, want infer (252, 20480 MiB)", h)
	}
	if dp, _ := s.Node("dp"); dp.AllocatedMilli != 1000 || len(dp.GPUs[0].Holders) != 1 {
		t.Errorf("node dp: allocated %d, holders %+v; want ann's 1000", dp.AllocatedMilli, dp.GPUs[0].Holders)
	}
	// 4000 + 4000 capacity; 1252 + 1000 allocated.
	if s.Cluster.CapacityMilli != 8000 || s.Cluster.AllocatedMilli != 2252 {
		t.Errorf("cluster %d of %d, want 2252 of 8000", s.Cluster.AllocatedMilli, s.Cluster.CapacityMilli)
	}
	pending := map[string]gpuview.PendingPod{}
	for _, p := range s.Pending {
		pending[p.Name] = p
	}
	if p := pending["wait"]; p.Demand != (&gpu.Demand{Count: 2, Milli: gpu.MilliPerGPU}).String() {
		t.Errorf("wait's demand %q (%q), want its claim's 2 GPUs", p.Demand, p.DemandError)
	}
	// A pod whose claim is not made yet is no known GPU pod; explain says
	// why. A pod whose claim is of another driver's class asks for no GPU.
	if _, listed := pending["new"]; listed {
		t.Errorf("new, whose claim is not made yet, is listed as a pending GPU pod")
	}
	if e := s.Explain(template, pods, nil); !strings.Contains(e.Verdict, "not made from their templates yet") {
		t.Errorf("explain new: %q, want its claim not made yet", e.Verdict)
	}
	if _, listed := pending["nic"]; listed {
		t.Errorf("nic, whose claim is of class nic.example.com, is listed as a pending GPU pod")
	}
	if p := pending["h"]; p.Demand != (&gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}).String() {
		t.Errorf("h, whose claim's class h100 selects NVIDIA's driver: demand %q, want 1 GPU", p.Demand)
	}
	// train's claim is allocated: it is bound, whatever its claim asks.
	if e := s.Explain(pods[0], pods, nil); e.Verdict != "it is bound to node dra" {
		t.Errorf("explain train: %q, want bound to dra", e.Verdict)
	}

	// The typical pods count each claim pod by its claim, as GPUPlacement
	// learns them: train's and h's one GPU, wait's two, infer's share of
	// 20480 MiB (Milli 1); ann's one GPU by annotation.
	shapes := map[string]bool{}
	for _, tp := range s.Typical {
		shapes[fmt.Sprintf("%d×%d/%d", tp.Demand.Count, tp.Demand.Milli, tp.Demand.MemoryMiB)] = true
	}
	for _, want := range []string{"1×1000/0", "2×1000/0", "1×1/20480"} {
		if !shapes[want] {
			t.Errorf("typical pods %v lack %s", shapes, want)
		}
	}

	// Without DRA objects the node shows no GPUs, and the claim pods ask
	// for none.
	if s := gpuview.Build(nodes, pods, gpuview.Options{}); len(s.Nodes) != 1 || len(s.Pending) != 0 {
		t.Errorf("without DRA: %d nodes, %d pending; want dp alone, none", len(s.Nodes), len(s.Pending))
	}
}

// TestExplainOnDRAGPUs: a claim pod is explained against the GPUs DRA
// publishes, an annotation pod against the others, and a gang of claim
// pods is fitted on DRA's GPUs.
func TestExplainOnDRAGPUs(t *testing.T) {
	nodes, pods, dra := draCluster()
	// 2 GPUs: dra has gpu-2 and gpu-3 free; dp has 3 A100s free but takes
	// no claim.
	two := claimPod("two", "two-gpu", "")
	// 3 GPUs: dra has 2 whole GPUs free.
	three := claimPod("three", "three-gpu", "")
	// 3 GPUs by annotation: dp's 3 free A100s.
	ann := gt.MakeGPUPod("ann3").Namespace("ml").GPUs(3).Obj()
	pods = append(pods, two, three, ann)
	dra.Claims = append(dra.Claims, claimFor("two-gpu", 2, ""), claimFor("three-gpu", 3, ""))
	s := gpuview.Build(nodes, pods, gpuview.Options{DRA: dra})

	for _, tt := range []struct {
		pod     *v1.Pod
		nodes   string // the nodes answered
		verdict string
	}{
		{two, "dra", "it fits now on dra"},
		// No fix is offered: preemption frees no claim's devices.
		{three, "dra", "nothing fits now: the GPUs DRA publishes that could take it are held by claims"},
		{ann, "dp", "it fits now on dp"},
	} {
		e := s.Explain(tt.pod, pods, nil)
		var answered []string
		for _, a := range e.Nodes {
			answered = append(answered, a.Node)
		}
		if strings.Join(answered, ",") != tt.nodes || !strings.HasPrefix(e.Verdict, tt.verdict) {
			t.Errorf("%s: nodes %v, verdict %q; want %s, %q…", tt.pod.Name, answered, e.Verdict, tt.nodes, tt.verdict)
		}
	}

	// A gang of two claim pods of 2 GPUs: 4 H100s on dra when empty, 2
	// free now: one member fits now.
	var gang []*v1.Pod
	for _, name := range []string{"g0", "g1"} {
		p := claimPod(name, name+"-gpu", "")
		p.Labels = map[string]string{podgroup.LabelPodGroup: "g"}
		gang = append(gang, p)
		dra.Claims = append(dra.Claims, claimFor(name+"-gpu", 2, ""))
	}
	pods = append(pods, gang...)
	s = gpuview.Build(nodes, pods, gpuview.Options{DRA: dra})
	e := s.Explain(gang[0], pods, nil)
	if e.Gang == nil || e.Gang.MinMember != 2 || e.Gang.FitNow != 1 || !strings.Contains(e.Gang.Short, "1 of the 2 pods") {
		t.Errorf("gang: %+v, want 1 of its 2 pods fitting now", e.Gang)
	}
}
