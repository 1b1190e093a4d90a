package gang

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Topology is where a node's GPUs sit: the interconnect groups of its GPUs
// and the topology domain (a rack, a block) the node is in.
type Topology struct {
	// Node is the node's name.
	Node string
	// Groups are the interconnect groups of the node's GPUs, each with the
	// GPU compute free in it on this node, in milli-GPU. A group named by the
	// nvidia.com/gpu.clique label spans every node with that label value
	// (a multi-node NVLink domain); the groups of the gpusched.io/gpu-devices
	// annotation, or a node's GPUs without a clique, are local to the node.
	Groups map[string]int64
	// Domain is the value of the node's topology label, "" without one.
	Domain string
}

// TopologyOf reads a node's topology from its GPUs as the ledger sees them
// and its topology label (domainKey, "" for none).
func TopologyOf(node *v1.Node, gpus *gpu.NodeGPUs, domainKey string) Topology {
	t := Topology{Node: node.Name, Groups: map[string]int64{}}
	if domainKey != "" {
		t.Domain = node.Labels[domainKey]
	}
	if gpus == nil || gpus.Inventory == nil {
		return t
	}
	clique := node.Labels[gpu.LabelClique]
	for i, d := range gpus.Inventory.Devices {
		id := "clique/" + clique
		if clique == "" {
			id = "node/" + node.Name + "/" + d.Group
		}
		t.Groups[id] += gpus.FreeMilli(i)
	}
	return t
}

// Points a node earns toward a gang's topology score; MaxPoints is a node in
// the gang's interconnect group and in its domain.
const (
	groupPoints  = 2
	domainPoints = 1
	MaxPoints    = groupPoints + domainPoints
)

// Preference scores nodes for the next pod of a gang, to keep the gang's
// collective traffic local: first on one interconnect group, then in one
// topology domain.
//
// Once pods of the gang are placed (reserved or bound), a node scores for
// sharing an interconnect group with one of them (groupPoints) and for being
// in the domain of one of them (domainPoints). Before any is placed, a node
// scores for being in an interconnect group, and in a domain, whose free GPU
// compute across the cluster could hold the whole gang: the first pod goes
// where the rest can follow.
type Preference struct {
	placed     bool
	groups     map[string]bool
	domains    map[string]bool
	groupFree  map[string]int64
	domainFree map[string]int64
	need       int64
}

// NewPreference builds the preference for a gang from the topology of every
// node, the nodes its placed pods are on, and the GPU compute (milli-GPU) its
// unplaced pods still need.
func NewPreference(nodes []Topology, placedOn map[string]bool, need int64) *Preference {
	p := &Preference{placed: len(placedOn) > 0, groups: map[string]bool{}, domains: map[string]bool{},
		groupFree: map[string]int64{}, domainFree: map[string]int64{}, need: need}
	for _, t := range nodes {
		for g, free := range t.Groups {
			p.groupFree[g] += free
			if placedOn[t.Node] {
				p.groups[g] = true
			}
		}
		if t.Domain != "" {
			for _, free := range t.Groups {
				p.domainFree[t.Domain] += free
			}
			if placedOn[t.Node] {
				p.domains[t.Domain] = true
			}
		}
	}
	return p
}

// MaxScore is the highest score, the scheduling framework's MaxNodeScore.
const MaxScore = 100

// Score is the node's score in 0..MaxScore: its points times
// MaxScore / MaxPoints.
func (p *Preference) Score(t Topology) int64 {
	points := int64(0)
	if p.inGroup(t) {
		points += groupPoints
	}
	if t.Domain != "" && ((p.placed && p.domains[t.Domain]) || (!p.placed && p.domainFree[t.Domain] >= p.need)) {
		points += domainPoints
	}
	return points * MaxScore / MaxPoints
}

func (p *Preference) inGroup(t Topology) bool {
	for g := range t.Groups {
		if (p.placed && p.groups[g]) || (!p.placed && p.groupFree[g] >= p.need) {
			return true
		}
	}
	return false
}
