package gpuplacement_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestDRAResourceClaimFirstFitMatchesAllocator: a claim for whole GPUs of
// one class is predicted from the GPUs the class selects on each node
// (without running the allocator per node); a claim that asks the same with
// a selector of its own ("true") goes through the allocator. On random
// clusters — six nodes of eight GPUs under two PCIe roots, a class that
// leaves some GPUs out, random GPUs allocated — both claims must score
// every node alike, under policies that care which GPUs are taken.
func TestDRAResourceClaimFirstFitMatchesAllocator(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 20 {
		var nodes []*v1.Node
		var slices []*resourceapi.ResourceSlice
		var excluded []string
		allocated := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
		for n := range 6 {
			name := fmt.Sprintf("n%d", n)
			nodes = append(nodes, gt.MakeGPUNode(name).Obj())
			w := gt.MakeNVIDIASlice(name+"-slice", name)
			for i := range 8 {
				uuid := fmt.Sprintf("GPU-%s-%d", name, i)
				w.GPU(i, uuid, h100Product, 81559, fmt.Sprintf("pci0000:%02x", i/4))
				switch rng.IntN(4) {
				case 0:
					excluded = append(excluded, "'"+uuid+"'")
				case 1:
					allocated.AllocatedDevices.Insert(structured.MakeDeviceID(gpu.DefaultDRADriver, name, fmt.Sprintf("gpu-%d", i)))
				}
			}
			slices = append(slices, w.Obj())
		}
		class := gpuClass.DeepCopy()
		class.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "!(device.attributes['gpu.nvidia.com'].uuid in [" + strings.Join(excluded, ", ") + "])"}}}
		count := int64(1 + rng.IntN(3))
		simple, general := gpuClaim("simple", count), gpuClaim("general", count)
		general.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}
		dra := &fakeDRA{slices: slices, gpuClass: class, allocated: allocated,
			claims: map[string]*resourceapi.ResourceClaim{"simple": simple, "general": general}}
		for _, policy := range []gpu.PolicyType{gpu.PolicyBestFit, gpu.PolicyFragFit} {
			args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: policy, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
				DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
			c := newClusterBinding(t, args, nodes, nil, false, frameworkruntime.WithSharedDRAManager(dra))
			got := map[string]map[string]int64{}
			for _, claim := range []string{"simple", "general"} {
				got[claim] = scoreAll(t, c, claimPod("p-"+claim, claim))
			}
			for node, s := range got["simple"] {
				if g := got["general"][node]; g != s {
					t.Errorf("trial %d, %s, %d GPUs, node %s: first-fit prediction scores %d, the allocator's %d", trial, policy, count, node, s, g)
				}
			}
		}
	}
}

// TestDRAResourceClaimClassOfSeveralDrivers: a class that selects devices
// of every driver, on a node where another driver's pool comes first in
// the allocator's order ("a.example.com" before "gpu.nvidia.com"): the
// allocator gives a claim that driver's device, so the node's GPUs are not
// what the claim takes, and the common-claim prediction must not assume
// they are. Both claims score every node alike.
func TestDRAResourceClaimClassOfSeveralDrivers(t *testing.T) {
	nodes, slices := draNodes()
	slices = append(slices, gt.MakeNVIDIASlice("a-dra", "dra").Driver("a.example.com").Pool("a-dra", 1, 1).GPU(0, "A-0", h100Product, 81559, "").Obj())
	simple, general := gpuClaim("simple", 1), gpuClaim("general", 1)
	general.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}
	dra := &fakeDRA{slices: slices, gpuClass: gpuClass, claims: map[string]*resourceapi.ResourceClaim{"simple": simple, "general": general}}
	args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: gpu.PolicyBestFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		DRA: config.DRA{Enabled: true, Driver: gpu.DefaultDRADriver}}
	c := newClusterBinding(t, args, nodes, nil, false, frameworkruntime.WithSharedDRAManager(dra))
	got, want := scoreAll(t, c, claimPod("p-simple", "simple")), scoreAll(t, c, claimPod("p-general", "general"))
	if !equalScores(got, want) {
		t.Errorf("common-claim prediction scores %v, the allocator's %v", got, want)
	}
}
