package dra

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
)

// The cycle's view of DRA is what the profile's other plugins read of DRA
// too (dragpus): GPUGang plans a gang of claim pods on the same GPUs,
// allocations and claim demands that GPUPlacement places them with.
var _ dragpus.GPUs = (*Cycle)(nil)

// NodeGPUs implements dragpus.GPUs: the node's view as Filter and Score
// see it (viewOf).
func (c *Cycle) NodeGPUs(node string) *gpu.NodeGPUs {
	d := c.nodes[node]
	if d == nil {
		return nil
	}
	return c.viewOf(node, d)
}

// EmptyNodeGPUs implements dragpus.GPUs. The view is made once per
// listing of the slices.
func (c *Cycle) EmptyNodeGPUs(node string) *gpu.NodeGPUs {
	i, ok := c.pub.index[node]
	if !ok {
		return nil
	}
	if v := c.pub.empties[i].Load(); v != nil {
		return v
	}
	v := gpu.EmptyDRANodeGPUs(node, c.nodes[node])
	c.pub.empties[i].Store(v)
	return v
}

// claimsOf is the pod's claims, in the pod's order; ok is false while one
// cannot be read: made from its template but not yet named in the pod's
// status (gpu.ClaimNames), or not in the tracker yet.
func (r *Reader) claimsOf(ctx context.Context, pod *v1.Pod) (claims []*resourceapi.ResourceClaim, ok bool) {
	names, made := gpu.ClaimNames(pod)
	if !made {
		r.logger(ctx).V(4).Info("Claims not made yet", "pod", klog.KObj(pod))
		return nil, false
	}
	tracker := r.manager.ResourceClaims()
	for _, name := range names {
		claim, err := tracker.Get(pod.Namespace, name)
		if err != nil {
			r.logger(ctx).V(4).Info("Claim unreadable", "pod", klog.KObj(pod), "claim", name, "err", err)
			return nil, false
		}
		claims = append(claims, claim)
	}
	return claims, true
}

// ServesGPUResource implements dragpus.GPUs (servesGPUsByDRA).
func (c *Cycle) ServesGPUResource(node fwk.NodeInfo) bool { return c.servesGPUsByDRA(node) }

// ClaimDemand implements dragpus.GPUs: the pod's claims, allocated or
// not, read as the device choice reads them (gpu.AskOfClaims), with the models
// their class and selectors admit (modelsOf). Claims that select no GPU of
// the driver (another driver's devices) are no GPU demand.
func (c *Cycle) ClaimDemand(ctx context.Context, pod *v1.Pod) (demand gpu.Demand, pending bool) {
	r := c.reader
	if r == nil || len(pod.Spec.ResourceClaims) == 0 {
		return gpu.Demand{}, false
	}
	claims, ok := r.claimsOf(ctx, pod)
	if !ok {
		return gpu.Demand{}, true
	}
	ask := gpu.AskOfClaims(claims, r.src.Driver)
	if ask == nil {
		return gpu.Demand{}, false
	}
	models, selectsGPUs := r.modelsOf(ctx, c, r.selectorOf(ask))
	if !selectsGPUs {
		return gpu.Demand{}, false
	}
	demand = ask.Demand()
	demand.Models = models
	return demand, false
}
