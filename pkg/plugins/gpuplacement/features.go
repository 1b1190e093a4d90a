package gpuplacement

import (
	"fmt"
	"slices"
	"sync"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement/internal/dra"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuhealth"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
	"github.com/gpusched/gpusched/pkg/plugins/internal/nodehost"
)

// Features describes nodes for the cycle's pod as an external policy sees
// them (gpu.NodeFeatures): for each node its state, the GPUs the plugin's
// policy would give the pod there, and that policy's score in the engine's
// score step over the feasible nodes (gpu.Policy.ScoreStep: 0 on every
// node for a pod the policy does not score), rescaled to 0..1 as
// NormalizeScore rescales it. It is the one
// feature extractor of the policy service (ExternalPolicy) and of the
// simulator's environment, which calls it with every node of the cluster
// after Filter. feasible[i] says whether the Filter plugins accept nodes[i];
// nil means they accept every node (the policy service is asked about
// feasible nodes only). The profile must have GPUPlacement, and its
// PreFilter must have run in state.
func Features(state fwk.CycleState, nodes []fwk.NodeInfo, feasible []bool) ([]gpu.NodeFeatures, error) {
	p, ok := gpuledger.Read(state).(*GPUPlacement)
	if !ok {
		return nil, fmt.Errorf("the cycle has no %s PreFilter: the profile has no %s plugin", Name, Name)
	}
	return p.features(state, nodes, feasible)
}

// features is Features for this plugin. Nodes whose GPUs a DRA driver
// publishes are described by the ledger's view of their annotation
// inventory, which is empty: the policy service scores them by their CPU
// and memory.
func (p *GPUPlacement) features(state fwk.CycleState, nodes []fwk.NodeInfo, feasible []bool) ([]gpu.NodeFeatures, error) {
	return p.featuresInto(&featureBuffer{}, nil, state, nodes, feasible)
}

// featureBuffer is the memory of one cycle's features, for the next
// cycle's once the last is done with them (featureBuffers).
type featureBuffer struct {
	// views and reqs are what the engine is asked about each node
	// (requests).
	views []*gpu.NodeGPUs
	reqs  []gpu.Request
	feats []gpu.NodeFeatures
	gpus  []gpu.GPUFeatures
	// stepViews and step are the cycle's score step (gpu.Policy.ScoreStep).
	stepViews []*gpu.NodeGPUs
	step      []gpu.NodeScore
}

// featureBuffers holds the feature buffers of finished cycles: the policy
// service's requests describe every node each cycle, and allocating that
// anew each time is most of what a cycle allocates.
var featureBuffers = sync.Pool{New: func() any { return &featureBuffer{} }}

// featuresInto is features written into buf's memory; the result is valid
// until buf is used again. memo, when not nil, answers for the nodes that
// did not change since it described them (the policy service's requests
// describe the same nodes cycle after cycle; the simulator's environment
// keeps rows of its own and asks about changed nodes only); the GPUs of
// those nodes are the memo's, valid until the plugin's next cycle, which
// the policy service's call ends before.
func (p *GPUPlacement) featuresInto(buf *featureBuffer, memo *featureMemo, state fwk.CycleState, nodes []fwk.NodeInfo, feasible []bool) ([]gpu.NodeFeatures, error) {
	demand, status := demandOf(state)
	if status != nil {
		return nil, status.AsError()
	}
	views, reqs, err := p.requestsInto(buf.views[:0], buf.reqs[:0], state, nodes, demand)
	if err != nil {
		return nil, err
	}
	defer func() { // the buffer outlives the cycle's views and demand
		clear(views)
		clear(reqs)
		buf.views, buf.reqs = views, reqs
	}()
	// The score step over the nodes the Filter plugins accept: the
	// builtin score is the engine's, rescaled to 0..1 as NormalizeScore
	// rescales it.
	stepViews := slices.Grow(buf.stepViews[:0], len(nodes))[:len(nodes)]
	for i := range nodes {
		stepViews[i] = nil
		if feasible == nil || feasible[i] {
			stepViews[i] = views[i]
		}
	}
	step := slices.Grow(buf.step[:0], len(nodes))[:len(nodes)]
	p.policy.ScoreStep(stepViews, reqs, fwk.MaxNodeScore, nil, step)
	out := slices.Grow(buf.feats[:0], len(nodes))[:len(nodes)]
	gpus := 0
	for _, v := range views {
		gpus += v.Len()
	}
	slab := slices.Grow(buf.gpus[:0], gpus)
	if memo != nil {
		// The memo is bounded by the cluster's nodes: a cycle scores a
		// window of them that moves from cycle to cycle.
		cluster := len(nodes)
		if all, err := p.handle.SnapshotSharedLister().NodeInfos().List(); err == nil {
			cluster = max(cluster, len(all))
		}
		memo.mu.Lock()
		defer memo.mu.Unlock()
		memo.begin(p.policy.FeaturesKey(), demand.Key(), cluster)
	}
	for i, ni := range nodes {
		alloc := ni.GetAllocatable()
		builtin := float64(step[i].Score) / float64(fwk.MaxNodeScore)
		out[i], slab = memo.appendFeatures(p.policy, slab, views[i], &reqs[i], step[i].Fits, step[i].Chosen, builtin,
			[2]int64{alloc.GetMilliCPU(), alloc.GetMemory() >> 20})
	}
	clear(stepViews) // the buffer outlives the cycle's views
	buf.stepViews, buf.step = stepViews, step
	buf.feats, buf.gpus = out, slab
	return out, nil
}

// requests is the request of demand on each node in the cycle, with the
// node's GPUs as the ledger sees them: what the engine is asked about the
// node.
func (p *GPUPlacement) requests(state fwk.CycleState, nodes []fwk.NodeInfo, demand *gpu.Demand) ([]*gpu.NodeGPUs, []gpu.Request, error) {
	return p.requestsInto(nil, nil, state, nodes, demand)
}

// requestsInto is requests appended to views and reqs.
func (p *GPUPlacement) requestsInto(views []*gpu.NodeGPUs, reqs []gpu.Request, state fwk.CycleState, nodes []fwk.NodeInfo, demand *gpu.Demand) ([]*gpu.NodeGPUs, []gpu.Request, error) {
	var maxima gpu.Maxima
	if data, err := state.Read(hostKey); err == nil {
		maxima = data.(*hostState).maxima
	} else {
		all, err := p.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: listing nodes: %w", Name, err)
		}
		maxima = p.clusterMaxima(all, dra.CycleOf(state))
	}
	exclude := gpuhealth.Read(state)
	for _, ni := range nodes {
		views = append(views, p.nodeGPUs(ni))
		reqs = append(reqs, gpu.Request{Demand: demand, Host: nodehost.Of(maxima, ni), Exclude: exclude})
	}
	return views, reqs, nil
}
