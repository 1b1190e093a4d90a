package whatif

import (
	"maps"
	"math"
	"slices"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// maxNodeScore is the framework's highest node score (fwk.MaxNodeScore),
// to which GPUPlacement's NormalizeScore rescales the engine's scores.
const maxNodeScore = 100

// newPolicy builds a policy as the simulator builds GPUPlacement's for a
// run: the built-in profile's weights (GPU compute, weight 1: the
// engine's defaults) and, for a policy that measures fragmentation, the
// workload's typical pods (gpu.TypicalPods, cut once), fixed
// (gpu.StaticShapes), as the simulator registers GPUPlacement
// (gpuplacement.NewWithShapes) and as gpuview measures fragmentation.
func (c *cluster) newPolicy(t gpu.PolicyType, fleet *runFleet) (*gpu.Policy, error) {
	return gpu.NewWorkloadPolicy(t, c.typical, fleet)
}

// runFleet is a run's fleet (gpu.FleetRoom): the cluster's GPUs by model,
// and the free room of the run's own views, which its placements change as
// a scheduler's change its ledger's, so that a policy's pressure on models
// follows them as it does in the scheduler and the simulator. run starts
// its room afresh.
type runFleet struct {
	gpu.Fleet
	room *gpu.RoomCount
}

// RoomByModel implements gpu.FleetRoom.
func (f *runFleet) RoomByModel() *gpu.FreeRoom {
	if f.room == nil {
		return nil
	}
	return f.room.RoomByModel()
}

// newFleet is a fleet for runs on the cluster.
func (c *cluster) newFleet() *runFleet { return &runFleet{Fleet: c.fleet} }

// placer is one policy's run over a copy of the cluster's nodes.
type placer struct {
	c      *cluster
	policy *gpu.Policy
	fleet  *runFleet
	// hostAware: the policy weighs CPU and memory (gpu.PolicyInfo.HostAware).
	hostAware bool
	nodes     []nodeState
	// feasible, the score step (stepViews, stepReqs, step: choose's) and
	// the counts of nodes rejected by reason (the engine's by set) are
	// scratch space for one pod.
	feasible    []int
	stepViews   []*gpu.NodeGPUs
	stepReqs    []gpu.Request
	step        []gpu.NodeScore
	rejected    map[string]int
	gpuRejected map[gpu.Reasons]int
}

// run places the new pods one at a time with the policy, built on fleet.
func (c *cluster) run(name string, policy *gpu.Policy, fleet *runFleet) Result {
	p := &placer{c: c, policy: policy, fleet: fleet, hostAware: policy.Info().HostAware, nodes: slices.Clone(c.nodes),
		rejected: map[string]int{}, gpuRejected: map[gpu.Reasons]int{}}
	views := make([]*gpu.NodeGPUs, len(p.nodes))
	for i := range p.nodes {
		views[i] = p.nodes[i].view
	}
	fleet.room = new(gpu.RoomCount)
	fleet.room.Add(gpu.RoomOfViews(nil, views, nil))
	out := Result{Policy: name, Type: policy.Type(), Placements: make([]Placement, 0, len(c.newPods))}
	out.Summary.CapacityMilli = c.capacityMilli
	out.Summary.AllocatedMilliBefore, out.Summary.FragmentedMilliBefore = p.measure()
	for i := range c.newPods {
		pl := p.place(&c.newPods[i])
		if pl.Placed() {
			out.Summary.Placed++
		} else {
			out.Summary.Unplaced++
		}
		out.Placements = append(out.Placements, pl)
	}
	out.Summary.AllocatedMilliAfter, out.Summary.FragmentedMilliAfter = p.measure()
	s := &out.Summary
	s.AllocatedPctBefore = pct(float64(s.AllocatedMilliBefore), c.capacityMilli)
	s.AllocatedPctAfter = pct(float64(s.AllocatedMilliAfter), c.capacityMilli)
	s.FragmentedPctBefore = pct(s.FragmentedMilliBefore, c.capacityMilli)
	s.FragmentedPctAfter = pct(s.FragmentedMilliAfter, c.capacityMilli)
	return out
}

// place decides one pod's node and GPUs, as one scheduling cycle of the
// simulator's built-in profile does, and counts it there.
func (p *placer) place(np *newPod) Placement {
	out := Placement{Pod: np.name, NotModeled: np.notModeled}
	d := &np.demand
	if p.hostAware {
		d = &np.withHost
	}
	// PreFilter: NodeAffinity may limit the cycle to the nodes the pod
	// names, or reject it outright.
	if np.conflict {
		out.Reason = reasonConflict
		return out
	}
	// Filter: every node, the first failing check's reasons counted (the
	// engine's by set, spelled out only if the pod fits nowhere).
	p.feasible = p.feasible[:0]
	clear(p.gpuRejected)
	total := 0
	for i := range p.nodes {
		if np.only != nil && !np.only[p.nodes[i].node.Name] {
			continue
		}
		total++
		gpuReasons, reasons := reject(np, &p.nodes[i])
		switch {
		case gpuReasons != 0:
			p.gpuRejected[gpuReasons]++
		case len(reasons) > 0:
			for _, r := range reasons {
				p.rejected[r]++
			}
		default:
			p.feasible = append(p.feasible, i)
		}
	}
	if len(p.feasible) == 0 {
		rejected := maps.Clone(p.rejected)
		for rs, nodes := range p.gpuRejected {
			for _, r := range rs.Strings() {
				rejected[r] += nodes
			}
		}
		clear(p.rejected)
		out.Reason, out.Rejected = fitMessage(total, rejected), rejected
		return out
	}
	clear(p.rejected)
	// Score: skipped for a single feasible node, as the framework skips
	// it; then GPUPlacement's PreScore records no capacities either.
	best := p.feasible[0]
	scored := len(p.feasible) > 1
	if scored {
		best = p.choose(d)
	}
	// Reserve: the policy's GPUs on the chosen node, with the host as
	// Score saw it (capacities only when PreScore recorded them).
	n := &p.nodes[best]
	out.Node = n.node.Name
	if !d.IsZero() {
		req := gpu.Request{Demand: d, Host: p.host(n, scored && p.hostAware)}
		chosen, fit := p.policy.Place(n.view, &req)
		if !fit.OK() { // cannot happen: the node passed the same check
			return Placement{Pod: np.name, Reason: fit.Reasons.String(), NotModeled: np.notModeled}
		}
		a := gpu.NewAssignment(n.view, d, chosen)
		next := n.view.With(&a)
		p.fleet.room.Replace(n.view, next)
		n.view = next
		out.Assignment, out.GPUs = &a, a.Devices
	}
	n.used = n.used.add(&np.requests)
	n.pods++
	return out
}

// choose scores the feasible nodes with the engine's score step
// (gpu.Policy.ScoreStep: GPUPlacement's Score and NormalizeScore, 0..100)
// and returns the best node, ties to the lowest tie-break rank
// (gpu.BestByRank). A pod without GPUs under a policy that weighs GPUs
// alone is not scored (GPUPlacement skips it): every node scores 0.
func (p *placer) choose(d *gpu.Demand) int {
	k := len(p.feasible)
	p.stepViews = slices.Grow(p.stepViews[:0], k)[:k]
	p.stepReqs = slices.Grow(p.stepReqs[:0], k)[:k]
	p.step = slices.Grow(p.step[:0], k)[:k]
	for j, i := range p.feasible {
		n := &p.nodes[i]
		p.stepViews[j], p.stepReqs[j] = n.view, gpu.Request{Demand: d, Host: p.host(n, p.hostAware)}
	}
	p.policy.ScoreStep(p.stepViews, p.stepReqs, maxNodeScore, nil, p.step)
	best := gpu.BestByRank(k, func(j int) int64 { return p.step[j].Score }, func(j int) int { return p.c.rank[p.feasible[j]] })
	return p.feasible[best]
}

// host is the node's CPU and memory as GPUPlacement's Score and Reserve
// give them to the policy (hostOf): free CPU and memory, and with
// capacities the cluster's largest CPU and GPU count, which PreScore
// records for host-aware policies.
func (p *placer) host(n *nodeState, capacities bool) gpu.Host {
	var maxima gpu.Maxima
	if capacities {
		maxima = p.c.maxima
	}
	return maxima.Host(gpu.Free{MilliCPU: n.alloc.milliCPU - n.used.milliCPU, MemoryBytes: n.alloc.memory - n.used.memory})
}

// measure is the cluster's allocated milli-GPU and fragmented free
// milli-GPU, as the simulator's curves measure them.
func (p *placer) measure() (allocated int64, fragmented float64) {
	for i := range p.nodes {
		n := &p.nodes[i]
		if n.view.Inventory == nil {
			continue
		}
		allocated += n.view.UsedMilli()
		fragmented += n.view.Fragment(n.alloc.milliCPU-n.used.milliCPU, p.c.typical)
	}
	return allocated, fragmented
}

// pct is part as a percentage of whole, rounded to 2 decimals; 0 when
// whole is 0.
func pct(part float64, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return math.RoundToEven(100*part/float64(whole)*100) / 100
}
