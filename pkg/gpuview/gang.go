package gpuview

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// GangSpec is what a gang's PodGroup says of it.
type GangSpec struct {
	// MinMember is spec.minMember.
	MinMember int
	// MixedModels is set when the PodGroup lets the gang's pods run on
	// different GPU models (podgroup.AnnotationGPUModels "mixed").
	MixedModels bool
}

// GangAnswer is what a pod's gang lacks as a whole.
type GangAnswer struct {
	// Name is the gang's PodGroup, "namespace/name".
	Name string `json:"name"`
	// MinMember is how many of its pods must run together.
	MinMember int `json:"minMember"`
	// Bound and Pending count its pods; FitNow is how many of the pending
	// ones the cluster's free GPUs take together right now.
	Bound   int `json:"bound"`
	Pending int `json:"pending"`
	FitNow  int `json:"fitNow"`
	// Short says what is missing, in a sentence; "" when the gang fits.
	Short string `json:"short,omitempty"`
	// Clique says how the gang fares in one NVLink clique, when the
	// cluster's nodes have cliques.
	Clique string `json:"clique,omitempty"`
	// Models are the GPU models the gang plugin holds the gang's pods to
	// (a gang runs on one model, docs/gang.md), the placement above
	// respecting them; empty when the gang may use any. ModelNote says
	// why when no single model holds the gang.
	Models    []string `json:"models,omitempty"`
	ModelNote string   `json:"modelNote,omitempty"`
}

// GangPods are a gang's pods that may still run (gpu.InWorkload: not
// finished, not a pending pod being deleted), as the snapshot's pods hold
// them, and what its PodGroup says of it.
type GangPods struct {
	// Key is the gang's "namespace/name": its PodGroup's, or "workload:"
	// and the name of its Workload API PodGroup (podgroup.GangOf).
	Key string
	// Bound are its pods on a node; Pending the others, in the order the
	// scheduler's queue takes them: Pending[:Queued] are in the snapshot's
	// Pending (the GPU pods of the schedulers it was built for), the rest
	// (pods without GPUs, or for another scheduler) come after.
	Bound, Pending []*v1.Pod
	Queued         int
	// MinMember is how many of its pods must run together: its PodGroup's
	// spec.minMember where the PodGroup is known, else all of its pods.
	MinMember int
	// MixedModels: the PodGroup lets the gang's pods run on different GPU
	// models (GangSpec.MixedModels).
	MixedModels bool
	// PlacedModels are the GPU models of the nodes its bound pods that ask
	// for GPUs run on (as the gang plugin holds the rest to them).
	PlacedModels []string
}

// Need is how many of the gang's pending pods must still be placed for it
// to run.
func (g *GangPods) Need() int { return max(0, g.MinMember-len(g.Bound)) }

// Gang is gang name's pods in namespace among pods, with what gangs (by
// "namespace/name") says of its PodGroup. It is the one reading of a gang
// for explain, the dashboard and the defragmenter.
func (s *Snapshot) Gang(namespace, name string, pods []*v1.Pod, gangs map[string]GangSpec) GangPods {
	g := GangPods{Key: namespace + "/" + name}
	for _, p := range pods {
		if n, ok := podgroup.GangOf(p); !ok || n != name || p.Namespace != namespace || !gpu.InWorkload(p) {
			continue
		}
		if p.Spec.NodeName != "" {
			g.Bound = append(g.Bound, p)
			i, onGPUNode := s.byName[p.Spec.NodeName]
			if d, _, err := s.demandOf(p); onGPUNode && err == nil && !d.IsZero() {
				g.PlacedModels = append(g.PlacedModels, gang.ModelsOf(s.views[i])...)
			}
			continue
		}
		g.Pending = append(g.Pending, p)
	}
	queued := make(map[*v1.Pod]int, len(s.Pending))
	for i := range s.Pending {
		queued[s.Pending[i].pod] = i + 1
	}
	position := func(p *v1.Pod) int {
		if at, ok := queued[p]; ok {
			return at
		}
		return len(s.Pending) + 1
	}
	slices.SortStableFunc(g.Pending, func(a, b *v1.Pod) int { return cmp.Compare(position(a), position(b)) })
	for _, p := range g.Pending {
		if _, ok := queued[p]; ok {
			g.Queued++
		}
	}
	g.MinMember = len(g.Bound) + len(g.Pending)
	if spec, known := gangs[g.Key]; known {
		g.MinMember, g.MixedModels = spec.MinMember, spec.MixedModels
	}
	return g
}

// GangOf is the gang pod belongs to, among the snapshot's pods (Gang); ok
// is false for a pod in no gang.
func (s *Snapshot) GangOf(pod *v1.Pod, gangs map[string]GangSpec) (g GangPods, ok bool) {
	name, ok := podgroup.GangOf(pod)
	if !ok {
		return GangPods{}, false
	}
	return s.Gang(pod.Namespace, name, s.pods, gangs), true
}

// explainGang places the gang's pending pods together on the cluster's free
// GPUs, each where it leaves the fewest suitable GPUs free (the engine's
// fit and choice of GPUs), and says what the rest would need.
func (s *Snapshot) explainGang(namespace, name string, pods []*v1.Pod, gangs map[string]GangSpec) *GangAnswer {
	g := s.Gang(namespace, name, pods, gangs)
	a := &GangAnswer{Name: g.Key, MinMember: g.MinMember, Bound: len(g.Bound)}
	var pending []gpu.Demand
	// claims: a member asks for GPUs through claims; others: a member asks
	// gpusched for GPUs. A gang of one kind goes to that kind of node; a
	// gang of both is checked against every node, as GPUGang checks it.
	claims, others := false, false
	for _, p := range g.Pending {
		d, byClaims, err := s.demandOf(p)
		if err != nil {
			continue
		}
		claims, others = claims || byClaims, others || (!byClaims && !d.IsZero())
		d.FillHost(p)
		pending = append(pending, d)
	}
	nodes := s.nodesFor(claims)
	if claims && others {
		nodes = append(nodes, s.nodesFor(false)...)
		slices.Sort(nodes)
	}
	a.Pending = len(pending)
	if _, known := gangs[g.Key]; !known {
		a.MinMember = a.Bound + a.Pending // the pods whose demand reads
	}
	need := max(0, a.MinMember-a.Bound)
	if empty := gang.FitEmpty(s.clusterOf(nodes), pending, need); !empty.Fits() {
		a.Short = "fits nowhere in this cluster: " + empty.Reason()
		return a
	}
	if !g.MixedModels {
		pending = s.holdToOneModel(a, nodes, pending, need, g.PlacedModels)
	}
	// The largest pods first, as the gang plugin's own check does.
	slices.SortStableFunc(pending, func(x, y gpu.Demand) int { return cmp.Compare(y.TotalMilli(), x.TotalMilli()) })
	views := slices.Clone(s.views)
	cpu := make([]int64, len(s.Nodes))
	mem := make([]int64, len(s.Nodes))
	for i := range s.Nodes {
		cpu[i], mem[i] = s.Nodes[i].FreeMilliCPU, s.Nodes[i].FreeMemoryMiB
	}
	var unplaced []gpu.Demand
	for i := range pending {
		d := &pending[i]
		best, bestFree := -1, 0
		var bestAssignment gpu.Assignment
		for _, n := range nodes {
			if s.Nodes[n].Unschedulable || d.MilliCPU > cpu[n] || d.HostMemoryMiB > mem[n] {
				continue
			}
			fit := gpu.Check(views[n], &gpu.Request{Demand: d})
			if !fit.OK() {
				continue
			}
			if free := fit.Free.Len(); best < 0 || free < bestFree {
				if asg, ok := gpu.PlaceClaim(views[n], d); ok {
					best, bestFree, bestAssignment = n, free, asg
				}
			}
		}
		if best < 0 {
			unplaced = append(unplaced, *d)
			continue
		}
		views[best] = views[best].With(&bestAssignment)
		cpu[best] -= d.MilliCPU
		mem[best] -= d.HostMemoryMiB
		a.FitNow++
	}
	if a.FitNow < need && len(unplaced) > 0 {
		d := &unplaced[0]
		most, where := 0, ""
		for _, n := range nodes {
			if free := gpu.Check(views[n], &gpu.Request{Demand: d}).Free.Len(); free > most {
				most, where = free, s.Nodes[n].Name
			}
		}
		a.Short = fmt.Sprintf("%d of the %d pods it still needs fit now; the next (%s) does not: ", a.FitNow, need, d.String())
		if d.IsShare() {
			a.Short += "no suitable GPU has that much free once the others are placed"
		} else {
			a.Short += fmt.Sprintf("it needs %d suitable free GPUs on one node, and the most left on one node is %d", d.Count, most)
			if where != "" {
				a.Short += " (" + where + ")"
			}
		}
	}
	a.Clique = s.cliqueAnswer(nodes, pending[:min(need, len(pending))])
	return a
}

// nodesFor is the indices of the nodes that take a demand of the kind
// (takes).
func (s *Snapshot) nodesFor(claims bool) []int {
	var out []int
	for i := range s.Nodes {
		if s.takes(i, claims) {
			out = append(out, i)
		}
	}
	return out
}

// clusterOf is the nodes as the gang plugin's fit on an empty cluster
// reads them: a DRA node by its published GPUs, with nothing allocated,
// any other by its Node object.
func (s *Snapshot) clusterOf(nodes []int) gang.Cluster {
	var c gang.Cluster
	for _, i := range nodes {
		if s.draNodes[i] {
			inv := s.dra.inventories[s.Nodes[i].Name]
			c.DRA = append(c.DRA, gpu.EmptyDRANodeGPUs(s.Nodes[i].Name, inv))
		} else {
			c.Nodes = append(c.Nodes, s.nodes[i])
		}
	}
	return c
}

// holdToOneModel applies the gang plugin's one-model rule
// (gang.ChooseModels) to the gang's pending demands: their models are
// narrowed to the models the plugin would allow, and a records them, or
// why no single model holds the gang (then any model goes).
func (s *Snapshot) holdToOneModel(a *GangAnswer, nodes []int, pending []gpu.Demand, need int, placed []string) []gpu.Demand {
	views := make([]*gpu.NodeGPUs, len(nodes))
	for j, i := range nodes {
		views[j] = s.views[i]
	}
	empty := gang.FitEmptyByModel(s.clusterOf(nodes), pending, need)
	free := gang.FitFreeByModel(views, pending, need)
	models, noneHolds := gang.ChooseModels(empty, free, placed)
	if noneHolds {
		a.ModelNote = empty.Reason() + "; the gang plugin places it across models"
		return pending
	}
	if len(models) == 0 {
		return pending
	}
	a.Models = models
	held := slices.Clone(pending)
	for i := range held {
		if held[i].IsZero() {
			continue
		}
		var allowed []string
		for _, m := range models {
			if held[i].AllowsModel(m) {
				allowed = append(allowed, m)
			}
		}
		held[i].Models = allowed
	}
	return held
}

// cliqueAnswer compares the whole GPUs the gang's pending pods need with the
// suitable free GPUs of the best NVLink clique. gpusched prefers one clique
// for a gang; it does not require it.
func (s *Snapshot) cliqueAnswer(nodes []int, pending []gpu.Demand) string {
	var needGPUs int
	for _, d := range pending {
		if !d.IsShare() {
			needGPUs += d.Count
		}
	}
	if needGPUs == 0 || len(pending) == 0 {
		return ""
	}
	d := &pending[0]
	free := map[string]int{}
	for _, i := range nodes {
		n := &s.Nodes[i]
		if n.Clique == "" || n.Unschedulable || s.views[i].Err != nil {
			continue
		}
		free[n.Clique] += gpu.Check(s.views[i], &gpu.Request{Demand: d}).Free.Len()
	}
	if len(free) == 0 {
		return ""
	}
	best, most := "", -1
	for _, c := range slices.Sorted(maps.Keys(free)) {
		if free[c] > most {
			best, most = c, free[c]
		}
	}
	if most >= needGPUs {
		return fmt.Sprintf("clique %s has %d suitable free GPUs, enough for the %d the gang needs", best, most, needGPUs)
	}
	return fmt.Sprintf("no clique holds it: the best, %s, has %d suitable free GPUs of the %d the gang needs; it fits in one clique if %d more are freed there",
		best, most, needGPUs, needGPUs-most)
}
