package gpu

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// PlanNode is one node as the migration planner sees it: its GPUs and what
// they hold, its free CPU and memory, and the pods bound on it.
type PlanNode struct {
	GPUs *NodeGPUs
	// Host is the node's CPU and memory (Host.Known set when the front end
	// knows them; the zero Host is taken as unlimited, as by the policies).
	Host Host
	// Pods are the node's bound pods: those holding GPUs there, and those
	// without GPUs that may move to free CPU and memory.
	Pods []PlanPod
}

// PlanPod is a bound pod as the planner sees it.
type PlanPod struct {
	// ID names the pod to the front end (its UID); the planner only copies it
	// into moves.
	ID string
	// Demand is what the pod asks for, with its CPU and memory requests as
	// the node's free CPU and memory count them: its replacement asks the
	// same.
	Demand Demand
	// Held is the pod's assignment on its node.
	Held Assignment
	// Priority is the pod's priority: a pod is never moved for a pending pod
	// of lower priority.
	Priority int32
	// Movable is the front end's verdict on whether the pod may be moved at
	// all: owned by a controller that recreates it, opted in, not in a gang,
	// within its disruption budget (docs/defragmentation.md). The planner
	// adds only the priority rule.
	Movable bool
}

// PlanDemand is the pod's demand as policy reads it, with the CPU and
// memory it requests as a node's free CPU and memory count them
// (PodRequests): what moving the pod frees, and what its replacement asks.
// Every front end that plans reads a pod's demand with it.
func PlanDemand(policy *Policy, pod *v1.Pod) (Demand, error) {
	d, err := policy.Demand(pod)
	if err != nil {
		return d, err
	}
	cpu, memoryBytes := PodRequests(pod)
	d.MilliCPU, d.HostMemoryMiB = cpu, memoryBytes>>20
	return d, nil
}

// MovesPerGPU bounds a plan's moves by the GPU it makes room for: four
// pods per GPU (a pod of one GPU may move 4, a share of half a GPU 2; a
// share below a quarter of a GPU never moves another pod). Moving more pods
// than that to place less GPU costs more disruption than the capacity it
// buys (docs/defragmentation.md has the measurements).
const MovesPerGPU = 4

// MaxMoves is the most pods a plan that makes room for d may move.
func MaxMoves(d *Demand) int { return int(d.TotalMilli() * MovesPerGPU / MilliPerGPU) }

// Move is one migration: a pod leaves its node (From, the plan's Node) for
// To (To.Node names the destination).
type Move struct {
	Pod  string
	From string
	To   Assignment
}

// Plan makes room for a pending pod: after Moves, the pod fits Node on
// Assignment's GPUs. Every move leaves Node for another node.
type Plan struct {
	Node       string
	Assignment Assignment
	Moves      []Move
}

// Planner finds migrations that make room for pods that fit nowhere.
type Planner struct {
	// Policy places the pending pod on the node made room on and chooses
	// each moved pod's destination, as it would place the pod were it
	// submitted again; a front end gives the policy its scheduler places
	// with, so that the plan's GPUs are the ones the scheduler would choose.
	Policy *Policy
	// MaxMoves bounds the pods one plan moves; 0 means 1.
	MaxMoves int
	// Admits, when set, says whether a node admits a pod beside its GPUs,
	// CPU and memory (the pod's node selector and affinity, the node's
	// taints: what the front end's other filters decide): pod is a moved
	// pod's PlanPod.ID, a pending pod's PendingPod.ID (MakeRoomForAll), or
	// "" for MakeRoom's pending pod. Nil admits every pod everywhere.
	Admits func(node, pod string) bool
}

// admits is p.Admits, or true without it.
func (p *Planner) admits(node, pod string) bool { return p.Admits == nil || p.Admits(node, pod) }

// maxPlanTries bounds the nodes whose plans are worked out in full (their
// moved pods given destinations), cheapest first. Plans of equal cost
// mostly fail or succeed alike (the cluster lacks room for their pods
// elsewhere, or not), so trying more mostly costs time.
const maxPlanTries = 16

// MakeRoom finds a plan of few moves after which pending, of priority, fits
// a node, its moved pods all fitting other nodes at once; ok is false when
// no plan within MaxMoves exists (or none is found among the cheapest
// maxPlanTries nodes). The plan is checked as a whole by the engine's own
// fit check on the nodes as they would be after it: the pending pod on its
// node once the moved pods are gone, and each moved pod on its destination
// with every move before it made, never on a GPU given twice and never past
// a node's free CPU or memory.
//
// On a node, the pods to move are the fewest whose removal lets the pending
// pod's GPUs fit (ChooseVictims, counting pods alike whatever their
// priority), then, while the node's CPU or memory is short of the pending
// pod's, the pods that free most of what is short: only movable pods of a
// priority no higher than the pending pod's, each of which fits some node
// as the cluster is now. Among nodes, fewer moves win, then less GPU moved
// (milli-GPU), then the node listed first. Each moved pod goes where Policy
// scores it highest, larger pods placed first; a pod never moves to the
// node it leaves.
func (p *Planner) MakeRoom(nodes []PlanNode, pending *Demand, priority int32) (plan Plan, ok bool) {
	return p.makeRoom(nodes, "", pending, priority, nil)
}

// makeRoom is MakeRoom for the pending pod that Admits knows as pendingID,
// never moving a pod to a node of avoid (by index in nodes).
func (p *Planner) makeRoom(nodes []PlanNode, pendingID string, pending *Demand, priority int32, avoid map[int]bool) (plan Plan, ok bool) {
	for _, c := range p.candidates(nodes, pendingID, pending, priority) {
		before := nodes[c.node].GPUs // the node with the moved pods gone
		for _, pod := range c.moves {
			if len(pod.Held.Devices) > 0 {
				before = before.Without(&pod.Held)
			}
		}
		if plan, ok := p.complete(nodes, c.node, before, c.moves, pending, avoid); ok {
			return plan, true
		}
	}
	return Plan{}, false
}

// candidate is a node a plan could make room on, and the pods it would
// move, milli-GPU in all.
type candidate struct {
	node  int
	moves []PlanPod
	milli int64
}

// candidates are the nodes where moving at most MaxMoves pods would make
// room for pending, cheapest first (fewest moves, then least GPU moved),
// the cheapest maxPlanTries of them.
func (p *Planner) candidates(nodes []PlanNode, pendingID string, pending *Demand, priority int32) []candidate {
	maxMoves := max(1, p.MaxMoves)
	var cands []candidate
	req := &Request{Demand: pending}
	elsewhere := placeable{nodes: nodes, fits: map[DemandKey]bool{}}
	for i := range nodes {
		n := &nodes[i]
		if n.GPUs == nil || n.GPUs.Inventory == nil || n.GPUs.Len() < pending.Count || !p.admits(n.GPUs.Name, pendingID) {
			continue
		}
		var movable []PlanPod
		var victims []Victim
		for _, pod := range n.Pods {
			if pod.Movable && pod.Priority <= priority && elsewhere.fitsSomewhere(&pod.Demand) {
				movable = append(movable, pod)
				// Priority 0 for all: a move costs one pod, whatever its
				// priority (the rule above keeps the pods of higher priority).
				victims = append(victims, Victim{Pods: 1, Held: []Assignment{pod.Held}})
			}
		}
		chosen, fits := ChooseVictims(n.GPUs, req, victims)
		if !fits || len(chosen) > maxMoves {
			continue
		}
		moves := make([]PlanPod, 0, len(chosen))
		for _, k := range chosen {
			moves = append(moves, movable[k])
		}
		if moves, fits = forHost(n.Host, pending, moves, movable, maxMoves); !fits || len(moves) == 0 {
			continue
		}
		c := candidate{node: i, moves: moves}
		for _, pod := range moves {
			c.milli += pod.Demand.TotalMilli()
		}
		cands = append(cands, c)
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(len(a.moves), len(b.moves)), cmp.Compare(a.milli, b.milli))
	})
	return cands[:min(len(cands), maxPlanTries)]
}

// forHost adds to moves, from movable, the pods that free most of the CPU
// and memory still short for pending on a node of host once moves are gone,
// until pending fits it; fits is false when it cannot within maxMoves.
func forHost(host Host, pending *Demand, moves, movable []PlanPod, maxMoves int) (_ []PlanPod, fits bool) {
	h := freed(host, moves, 1)
	for !hostFits(h, pending) {
		if len(moves) == maxMoves {
			return moves, false
		}
		shortCPU, shortMemory := max(0, pending.MilliCPU-h.FreeMilliCPU), max(0, pending.HostMemoryMiB-h.FreeMemoryMiB)
		best, bestGain := -1, 0.0
		for k := range movable {
			if slices.ContainsFunc(moves, func(m PlanPod) bool { return m.ID == movable[k].ID }) {
				continue
			}
			var gain float64
			if shortCPU > 0 {
				gain += float64(min(movable[k].Demand.MilliCPU, shortCPU)) / float64(shortCPU)
			}
			if shortMemory > 0 {
				gain += float64(min(movable[k].Demand.HostMemoryMiB, shortMemory)) / float64(shortMemory)
			}
			if gain > bestGain {
				best, bestGain = k, gain
			}
		}
		if best < 0 {
			return moves, false
		}
		moves = append(moves, movable[best])
		h = freed(h, movable[best:best+1], 1)
	}
	return moves, true
}

// placeable remembers, per demand, whether it fits some node as the nodes
// are (its own included): a pod that fits none cannot be moved, whatever
// the plan.
type placeable struct {
	nodes []PlanNode
	fits  map[DemandKey]bool
}

func (p *placeable) fitsSomewhere(d *Demand) bool {
	k := d.Key()
	fits, ok := p.fits[k]
	if !ok {
		req := &Request{Demand: d}
		for i := range p.nodes {
			n := &p.nodes[i]
			if n.GPUs != nil && hostFits(n.Host, d) && (d.IsZero() || n.GPUs.Inventory != nil && Check(n.GPUs, req).OK()) {
				fits = true
				break
			}
		}
		p.fits[k] = fits
	}
	return fits
}

// complete gives each of moves a destination on nodes other than
// nodes[target] and those of avoid, whose GPUs without the moved pods are
// before, and places pending there; ok is false when a moved pod fits
// nowhere.
func (p *Planner) complete(nodes []PlanNode, target int, before *NodeGPUs, moves []PlanPod, pending *Demand, avoid map[int]bool) (Plan, bool) {
	n := &nodes[target]
	host := freed(n.Host, moves, 1)
	chosen, fit := p.Policy.Place(before, &Request{Demand: pending, Host: host})
	if !fit.OK() {
		return Plan{}, false
	}
	plan := Plan{Node: n.GPUs.Name, Assignment: NewAssignment(before, pending, chosen)}
	// Every node's view and host as the plan changes them.
	views := make([]*NodeGPUs, len(nodes))
	hosts := make([]Host, len(nodes))
	for i := range nodes {
		views[i], hosts[i] = nodes[i].GPUs, nodes[i].Host
	}
	order := slices.Clone(moves)
	slices.SortStableFunc(order, func(a, b PlanPod) int {
		return cmp.Compare(b.Demand.TotalMilli(), a.Demand.TotalMilli())
	})
	for _, pod := range order {
		best, bestScore := -1, int64(-1)
		var bestChosen DeviceSet
		for i := range nodes {
			if i == target || avoid[i] || views[i] == nil || views[i].Inventory == nil || !hostFits(hosts[i], &pod.Demand) || !p.admits(views[i].Name, pod.ID) {
				continue
			}
			chosen, fit, score := p.Policy.PlaceAndScore(views[i], &Request{Demand: &pod.Demand, Host: hosts[i]})
			if fit.OK() && score > bestScore {
				best, bestScore, bestChosen = i, score, chosen
			}
		}
		if best < 0 {
			return Plan{}, false
		}
		a := NewAssignment(views[best], &pod.Demand, bestChosen)
		if !pod.Demand.IsZero() {
			views[best] = views[best].With(&a)
		}
		hosts[best] = freed(hosts[best], []PlanPod{pod}, -1)
		plan.Moves = append(plan.Moves, Move{Pod: pod.ID, From: n.GPUs.Name, To: a})
	}
	return plan, true
}

// freed is h with the CPU and memory of pods given back (sign 1) or taken
// (sign -1); an unknown host stays unknown.
func freed(h Host, pods []PlanPod, sign int64) Host {
	if !h.Known {
		return h
	}
	for _, pod := range pods {
		h.FreeMilliCPU += sign * pod.Demand.MilliCPU
		h.FreeMemoryMiB += sign * pod.Demand.HostMemoryMiB
	}
	return h
}

// hostFits reports whether d's CPU and memory fit h; an unknown host takes
// anything.
func hostFits(h Host, d *Demand) bool { return h.free().takes(d) }
