// Package dra is GPUPlacement's half for GPUs that a DRA driver publishes
// (docs/dra.md): the cycle's view of the driver's GPUs and allocations,
// read through the scheduler's shared DRA manager (Reader, Cycle); the
// policy's choice of a claim's devices, handed to GPUDynamicResources as a
// device order; the prediction and score of what DRA allocates where the
// policy does not choose; and the rules that keep a GPU from being given
// both by annotation and by DRA on one node.
//
// GPUPlacement calls a Placer from its PreFilter, Filter, PreScore and
// Score, and on a node that publishes GPUs of the driver (NodeOf) leaves
// the decision to it; its Reserve and preemption view only pass such nodes
// by. A profile without DRA has no Placer.
package dra

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The state keys the Placer leaves its own per-cycle data under, for
// itself alone (the cycle's view of DRA, which other plugins read, is
// under dragpus.StateKey): the policy's choice of devices (PreFilter, for
// Score), the prediction of DRA's allocation (PreScore, for Score), and
// the classes a claim pod's claims ask for (PreFilter, for FilterClaims).
const (
	draChoiceKey    fwk.StateKey = "DRAChoice"
	claimsKey       fwk.StateKey = "DRAClaimPrediction"
	claimClassesKey fwk.StateKey = "DRAClaimClasses"
)

// Placer is the DRA half of a placement plugin: it reads DRA once per
// cycle, chooses claims' devices with the plugin's policy, and filters and
// scores the nodes whose GPUs DRA allocates.
type Placer struct {
	reader *Reader
	policy *gpu.Policy
	handle fwk.Handle
	// clusterMaxima is the cluster's largest capacities as host-aware
	// policies normalize by, the plugin's PreScore rule, so that a device
	// choice in PreFilter is made with the request Score makes.
	clusterMaxima func(nodes []fwk.NodeInfo, cycle *Cycle) gpu.Maxima

	// draOrder guards ordersDRA: whether GPUDynamicResources follows the
	// owner at PreFilter, read once the framework is complete.
	draOrder  sync.Once
	ordersDRA bool
	// twiceReported maps a node name to the resourceVersion of it whose
	// GPUs were reported as published both ways (reportPublishedTwice).
	twiceReported sync.Map
}

// NewPlacer is the DRA half of the plugin that r reads for, placing with
// policy; nil when r is (DRA disabled).
func NewPlacer(r *Reader, policy *gpu.Policy, h fwk.Handle, clusterMaxima func([]fwk.NodeInfo, *Cycle) gpu.Maxima) *Placer {
	if r == nil {
		return nil
	}
	return &Placer{reader: r, policy: policy, handle: h, clusterMaxima: clusterMaxima}
}

// Read leaves the cycle's view of DRA in the state (CycleOf); found is
// false when no node publishes GPUs of the driver (and, withHeld, no claim
// holds GPUs of the driver on any node).
func (p *Placer) Read(ctx context.Context, state fwk.CycleState, withHeld bool) (found bool, status *fwk.Status) {
	cycle, err := p.reader.read(ctx, withHeld)
	if err != nil {
		return false, fwk.AsStatus(fmt.Errorf("%s: %w", p.reader.owner, err))
	}
	if cycle == nil {
		return false, nil
	}
	state.Write(draKey, cycle)
	return true, nil
}

// Filter decides a GPU demand by annotation or nvidia.com/gpu on a node
// that publishes GPUs of the driver (NodeOf): gpusched gives none of them
// by annotation (filterNode), and whole GPUs deferred to DRA wait while a
// live pod there holds GPUs by annotation.
func (p *Placer) Filter(cycle *Cycle, d *gpu.DRAInventory, demand *gpu.Demand, nodeInfo fwk.NodeInfo) *fwk.Status {
	if nodeInfo.GetAllocatable().GetScalarResources()[gpu.ResourceGPU] > 0 {
		p.reportPublishedTwice(nodeInfo.Node())
	}
	if status := filterNode(cycle, d, demand, nodeInfo); status != nil {
		return status
	}
	if holdsByAnnotation(nodeInfo) { // deferred whole GPUs are DRA's too
		return fwk.NewStatus(fwk.Unschedulable, ReasonAnnotationHolders)
	}
	return nil
}

// PreScore prepares the prediction of what DRA allocates for the pod, for
// Score: its own claims, or the claim DynamicResources makes for whole GPUs
// deferred to it on nodes that serve nvidia.com/gpu through DRA.
func (p *Placer) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, cycle *Cycle, demand *gpu.Demand) {
	switch {
	case demand.IsZero() && HasClaims(pod):
		p.preScoreClaims(ctx, state, pod, cycle)
	case !demand.IsZero() && !demand.IsShare() && cycle.gpuMapped:
		p.preScoreDeferred(ctx, state, pod, cycle, demand)
	}
}

// Score is the policy's score on a node that publishes GPUs of the driver
// (NodeOf), with host the request's host (the node's free CPU and memory,
// the cluster's maxima): of the devices the policy chose for the pod's
// claims where it chose them; else of those the structured allocator is
// predicted to take (scoreClaims), or, for a deferred demand it cannot
// predict, a first fit over the node's GPUs (scoreDRA).
func (p *Placer) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo, cycle *Cycle, d *gpu.DRAInventory, demand *gpu.Demand, host gpu.Host) int64 {
	name := nodeInfo.Node().Name
	view := cycle.viewOf(name, d)
	if choice := draChoiceOf(state); choice != nil {
		if c := choice.at(ctx, nodeInfo); c != nil {
			req := gpu.Request{Demand: &c.demand, Host: host}
			// The memo answers for the typical pods, census and prices of
			// now (PreFilter's may have moved since): its score is the
			// chosen GPUs' when it chooses them again.
			if c.memoized {
				if again, fit, score := p.policy.PlaceAndScore(view, &req); fit.OK() && again == c.chosen {
					return score
				}
			}
			return p.policy.Score(view, &req, c.chosen)
		}
	}
	if pred := claimPredictionOf(state); pred != nil {
		return p.scoreClaims(ctx, cycle, pod, nodeInfo, demand, pred, d, view, host)
	}
	if demand.IsZero() {
		return p.policy.Score(view, &gpu.Request{Demand: demand, Host: host}, 0)
	}
	return p.scoreDRA(demand, view, host)
}
