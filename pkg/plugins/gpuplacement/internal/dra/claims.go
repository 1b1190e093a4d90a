package dra

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// claimPrediction is a pod's unallocated ResourceClaims and an allocator
// over the cycle's slices and allocated state: the inputs of the
// DynamicResources plugin's own Filter. Safe for concurrent use (Score runs
// in parallel over nodes): the allocator is built once and is itself safe.
type claimPrediction struct {
	// newAllocator builds the allocator, once, when a node first needs it:
	// the common claim is predicted without (simple).
	newAllocator func() (structured.Allocator, error)
	once         sync.Once
	allocator    structured.Allocator
	claims       []*resourceapi.ResourceClaim
	// simple, when set, is the claims as one first-fit request of a class,
	// predicted without the allocator where the class's GPUs on the node
	// are known (class.go).
	simple *simpleRequest
}

// Clone implements fwk.StateData.
func (s *claimPrediction) Clone() fwk.StateData { return s }

// HasClaims reports whether the pod uses ResourceClaims of its own.
func HasClaims(pod *v1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// preScoreClaims prepares the prediction of a claim pod's devices: the
// claims the pod references that DRA has yet to allocate (neither
// allocated nor pending for another pod), in the pod's order, and a
// structured allocator built as the DynamicResources plugin builds its own.
// It prepares nothing when there is nothing to allocate or a claim cannot
// be read; the pod is then not scored by GPUPlacement.
func (p *Placer) preScoreClaims(ctx context.Context, state fwk.CycleState, pod *v1.Pod, cycle *Cycle) {
	if claims, ok := p.claimsToAllocate(ctx, pod); ok {
		p.predictWith(ctx, state, pod, cycle, claims)
	}
}

// preScoreDeferred prepares the prediction of the devices DRA takes for
// whole GPUs deferred to it (nvidia.com/gpu on nodes that serve it through
// DRA, KEP-5004): the claim DynamicResources makes for the request — the
// DeviceClass that maps nvidia.com/gpu, as many devices as the pod asks
// for — allocated by the same allocator, so that the class's own selectors
// count as they do for DRA.
func (p *Placer) preScoreDeferred(ctx context.Context, state fwk.CycleState, pod *v1.Pod, cycle *Cycle, demand *gpu.Demand) {
	resolver := p.reader.manager.DeviceClassResolver()
	if resolver == nil {
		return
	}
	class := resolver.GetDeviceClass(gpu.ResourceGPU)
	if class == nil {
		return
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-" + deferredRequest, Namespace: pod.Namespace, UID: pod.UID + "-" + deferredRequest},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: deferredRequest,
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(demand.Count)},
		}}}},
	}
	p.predictWith(ctx, state, pod, cycle, []*resourceapi.ResourceClaim{claim})
}

// deferredRequest names the request of the claim preScoreDeferred predicts.
const deferredRequest = "deferred-gpus"

// predictWith leaves an allocator over the cycle's DRA state and the claims
// to allocate in the cycle state, for Score; nothing when there are no
// claims or the allocator cannot be built.
func (p *Placer) predictWith(ctx context.Context, state fwk.CycleState, pod *v1.Pod, cycle *Cycle, claims []*resourceapi.ResourceClaim) {
	if len(claims) == 0 {
		return
	}
	newAllocator := func() (structured.Allocator, error) {
		return structured.NewAllocator(ctx, p.reader.features, *cycle.allocated, p.reader.manager.DeviceClasses(), cycle.slices, p.reader.celCache)
	}
	state.Write(claimsKey, &claimPrediction{newAllocator: newAllocator, claims: claims, simple: simpleRequestOf(claims)})
}

// allocatorFor is the prediction's allocator, built on first use; nil when
// it cannot be built (the pod is then not scored by GPUPlacement).
func (pred *claimPrediction) allocatorFor(ctx context.Context, r *Reader, pod *v1.Pod) structured.Allocator {
	pred.once.Do(func() {
		var err error
		if pred.allocator, err = pred.newAllocator(); err != nil {
			r.logger(ctx).V(4).Info("Not predicting DRA devices", "pod", klog.KObj(pod), "err", err)
		}
	})
	return pred.allocator
}

// scoreClaims is the policy's score of the devices the structured
// allocator gives the pod's claims on the node (DRA's own choice, first
// fit), seen as the engine's demand (gpu.DRAInventory.PlacementOf). 0 when
// the claims do not fit the node or take none of its GPUs.
func (p *Placer) scoreClaims(ctx context.Context, cycle *Cycle, pod *v1.Pod, nodeInfo fwk.NodeInfo, demand *gpu.Demand, pred *claimPrediction, d *gpu.DRAInventory, view *gpu.NodeGPUs, host gpu.Host) int64 {
	if pred.simple != nil {
		if class, ok := p.reader.classDevicesOf(ctx, cycle, nodeInfo.Node(), d, pred.simple.class); ok {
			placed := gpu.Demand{Count: pred.simple.count, Milli: gpu.MilliPerGPU, MilliCPU: demand.MilliCPU, HostMemoryMiB: demand.HostMemoryMiB}
			chosen, fits := gpu.PredictFirstFitIn(view, &placed, class)
			if !fits {
				return 0
			}
			return p.policy.Score(view, &gpu.Request{Demand: &placed, Host: host}, chosen)
		}
	}
	allocator := pred.allocatorFor(ctx, p.reader, pod)
	if allocator == nil {
		return 0
	}
	results, err := allocator.Allocate(ctx, nodeInfo.Node(), pred.claims)
	if err != nil || results == nil {
		return 0
	}
	var picked []gpu.DRAPicked
	for _, result := range results {
		for _, r := range result.Devices.Results {
			if r.Driver != p.reader.src.Driver {
				continue
			}
			pick := gpu.DRAPicked{ID: gpu.DRADeviceID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}, Shared: r.ShareID != nil}
			if q, ok := r.ConsumedCapacity["memory"]; ok {
				pick.MemoryMiB = gpu.CeilMiB(q)
			}
			picked = append(picked, pick)
		}
	}
	placed, chosen, ok := d.PlacementOf(picked)
	if !ok {
		return 0
	}
	placed.MilliCPU, placed.HostMemoryMiB = demand.MilliCPU, demand.HostMemoryMiB
	req := gpu.Request{Demand: &placed, Host: host}
	return p.policy.Score(view, &req, chosen)
}

// claimPredictionOf is the cycle's claim prediction, or nil.
func claimPredictionOf(state fwk.CycleState) *claimPrediction {
	data, err := state.Read(claimsKey)
	if err != nil {
		return nil
	}
	return data.(*claimPrediction)
}
