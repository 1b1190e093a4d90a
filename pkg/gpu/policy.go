package gpu

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaxScore is the highest score a policy gives a node. Scores are fine-grained
// so that a share of 1 milli-GPU on an 8-GPU node still moves the score; front
// ends rescale them with Policy.Rescale (to 0..100 for plugins, 0..10 for the
// extender).
const MaxScore int64 = 1_000_000

// Request is one placement question: a demand, on a node whose CPU and
// memory are Host, choosing only among GPUs that Exclude does not exclude.
// Every front end asks it the same way, so every front end decides alike.
type Request struct {
	// Demand is what the pod asks for; nil or zero for a pod without GPUs.
	// Policies that weigh the node's CPU and memory (PolicyInfo.HostAware)
	// read its MilliCPU and HostMemoryMiB too (see Policy.Demand). It is a
	// pointer so that a front end asks about many nodes without copying it.
	Demand *Demand
	// Host is the node's CPU and memory; the zero Host means unknown.
	Host Host
	// Exclude, when set, names GPUs that must not be chosen although they
	// are free (for example GPUs whose telemetry reports errors).
	Exclude Excluder
}

// Host is a node's CPU and memory as host-aware policies see them, with the
// capacities they normalize by. The zero Host means "unknown", with one
// meaning in every policy: the node's CPU and memory are taken as unlimited
// when checking which pod shapes still fit, and they add nothing to a score.
type Host struct {
	// Known is set by a front end that knows the node's CPU and memory.
	Known bool
	// FreeMilliCPU is the node's allocatable CPU minus its pods' requests.
	FreeMilliCPU int64
	// FreeMemoryMiB is the node's allocatable memory minus its pods' requests.
	FreeMemoryMiB int64
	// MaxMilliCPU and MaxGPUs are the largest CPU and GPU capacities of any
	// node in the cluster; 0 means this node's own.
	MaxMilliCPU int64
	MaxGPUs     int
}

// Strategy is what a policy implements: which GPUs to take, and how good a
// placement is, for demand d on node n whose CPU and memory are h (the
// request's; the GPUs it excludes are already left out of candidates).
// Both are called only with a demand that fits the node (Check), except
// that Score is also called for a demand without GPUs (chosen empty) when
// the policy is host-aware. The host comes by value, so that a front end's
// request stays on its stack; a strategy must not keep d.
type Strategy interface {
	// Choose picks d.Count GPUs from candidates, which holds at least that
	// many.
	Choose(n *NodeGPUs, d *Demand, h Host, candidates DeviceSet) DeviceSet
	// Score rates placing d on the chosen GPUs of n: 0..MaxScore, higher is
	// better.
	Score(n *NodeGPUs, d *Demand, h Host, chosen DeviceSet) int64
}

// Policy is a configured placement policy: a registered strategy (see
// Policies) and what its registry entry says about it. Front ends ask it
// everything they need, never the strategy's type. A Policy is safe for
// concurrent use.
type Policy struct {
	info     *PolicyInfo
	strategy Strategy
	shapes   Shapes
	fleet    Fleet
	// cfg is what the strategy was built from (WithFleet builds it again).
	cfg PolicyConfig
	// demands interns the demands PlaceAndScore remembers answers for.
	demands demandIDs
}

// Type is the policy's registered name.
func (p *Policy) Type() PolicyType { return p.info.Type }

// Info is the policy's registry entry.
func (p *Policy) Info() PolicyInfo { return *p.info }

// Scores reports whether the policy scores a pod with demand d: every pod
// that asks for GPUs, and a pod without GPU demand only under a host-aware
// policy, which weighs the node's CPU and memory for every pod (PairFit
// keeps CPU for GPU pods). Where it does not, a front end leaves the pod to
// the scheduler's other scores: the plugin skips it, the extender scores
// every node 0. The one rule every front end decides it by; a nil d is no
// demand.
func (p *Policy) Scores(d *Demand) bool { return (d != nil && !d.IsZero()) || p.info.HostAware }

// Shapes is the distribution of typical pods a fragmentation-aware policy
// measures against; nil for other policies.
func (p *Policy) Shapes() Shapes { return p.shapes }

// census is the fleet's GPUs by model; nil without a fleet.
func (p *Policy) census() ModelGPUs {
	if p.fleet == nil {
		return nil
	}
	return p.fleet.GPUsByModel()
}

// Place decides whether the request's demand fits n and on which GPUs, as
// the policy prefers. The returned Fit says why it does not fit; chosen is 0
// unless fit.OK(). A demand without GPUs fits with nothing chosen. This is
// the one way every front end places a pod.
func (p *Policy) Place(n *NodeGPUs, req *Request) (chosen DeviceSet, fit Fit) {
	if req.Demand == nil || req.Demand.IsZero() {
		return 0, Fit{}
	}
	// Check, inlined: Place runs for every feasible node of every cycle.
	free, reasons := candidates(n, req.Demand)
	if reasons != 0 {
		return 0, Fit{Free: free, Reasons: reasons}
	}
	if req.Exclude != nil {
		if fit = withoutExcluded(n, req, free); !fit.OK() {
			return 0, fit
		}
		free = fit.Free
	}
	return p.strategy.Choose(n, req.Demand, req.Host, free), Fit{Free: free}
}

// Score rates placing the request's demand on the chosen GPUs of n (as
// Place chose them), 0..MaxScore, higher is better. For a demand without
// GPUs only a host-aware policy has anything to say; others score 0.
func (p *Policy) Score(n *NodeGPUs, req *Request, chosen DeviceSet) int64 {
	d := req.Demand
	if d == nil {
		d = &noDemand
	}
	if !p.Scores(d) {
		return 0
	}
	return p.strategy.Score(n, d, req.Host, chosen)
}

// noDemand is the demand of a request without one. Strategies only read it.
var noDemand Demand

// Demand is the pod's demand as this policy needs it: the GPU demand
// (DemandFromPod), with the pod's CPU and memory requests when the policy
// weighs the node's CPU and memory (PolicyInfo.HostAware).
func (p *Policy) Demand(pod *v1.Pod) (Demand, error) {
	d, err := DemandFromPod(pod)
	if err != nil {
		return d, err
	}
	if p.info.HostAware {
		d.FillHost(pod)
	}
	return d, nil
}

// Observe counts a pod's shape in the distribution a learning
// fragmentation-aware policy measures against (a ShapeWindow), once per
// pod UID; for any other policy it does nothing. Front ends call it for
// every pod they are asked to place.
func (p *Policy) Observe(uid types.UID, d Demand) {
	if w, ok := p.shapes.(*ShapeWindow); ok {
		w.ObservePod(uid, d)
	}
}

// Forget tells the policy that a pod Observe saw is gone (deleted), so
// that it stops remembering the pod.
func (p *Policy) Forget(uid types.UID) {
	if w, ok := p.shapes.(*ShapeWindow); ok {
		w.ForgetPod(uid)
	}
}

// Rescale maps the engine scores of one request's feasible nodes, in
// place, to 0..maxOut, the way the policy's scores mean to be compared:
// by rank for an ordinal policy (RescaleByRank), else min-max
// (RescaleMinMax). Every front end rescales through it.
func (p *Policy) Rescale(scores []int64, maxOut int64) {
	if p.info.Ordinal {
		RescaleByRank(scores, maxOut)
		return
	}
	RescaleMinMax(scores, maxOut)
}

// Weights weigh the resources a policy scores: GPU compute (milli-GPU) and
// GPU memory. A weight of 0 leaves the resource out; at least one must be
// positive.
type Weights struct {
	GPU    int64
	Memory int64
}

// DefaultWeights scores GPU compute only.
var DefaultWeights = Weights{GPU: 1}

func (w Weights) validate() error {
	if w.GPU < 0 || w.Memory < 0 || w.GPU+w.Memory == 0 {
		return fmt.Errorf("resource weights %+v: want non-negative weights, at least one positive", w)
	}
	return nil
}
