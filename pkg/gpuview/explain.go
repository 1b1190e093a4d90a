package gpuview

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Explanation says why a pod does not run and what would let it.
type Explanation struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Demand    string `json:"demand,omitempty"`
	// Node is the node the pod is bound to, if it is.
	Node string `json:"node,omitempty"`
	// Verdict is the answer in one sentence.
	Verdict string `json:"verdict"`
	// Fixes are the nearest ways the pod would fit, cheapest first: on each
	// node where freeing GPUs could cure it, the fewest, lowest-priority
	// holders to go.
	Fixes []Fix `json:"fixes,omitempty"`
	// Nodes are every GPU node's answer: those where it fits first, then
	// by the cost of their fix, then those no freeing can cure.
	Nodes []NodeAnswer `json:"nodes,omitempty"`
	// Gang is what the pod's gang lacks as a whole, when it has one.
	Gang *GangAnswer `json:"gang,omitempty"`
	// QueuePosition is the pod's place among QueueLength pending GPU pods
	// in the order the scheduler's queue takes them; 0 when bound.
	QueuePosition int `json:"queuePosition,omitempty"`
	QueueLength   int `json:"queueLength,omitempty"`
	// SchedulerSays is the message of the pod's PodScheduled=False
	// condition: the summary of the last attempt.
	SchedulerSays string `json:"schedulerSays,omitempty"`
	// Migration is what the defragmenter does or would do for the pod (a
	// plan under way, the plan it would make, or why there is none); the
	// front end that knows the cluster's disruption budgets fills it in
	// (defrag.Explain).
	Migration string `json:"migration,omitempty"`
}

// NodeAnswer is one node's answer for the pod.
type NodeAnswer struct {
	Node string `json:"node"`
	Fits bool   `json:"fits"`
	// Reasons are the engine's stable reason texts (gpu.Reason), then the
	// host's ("insufficient cpu", "insufficient memory", "node is cordoned").
	Reasons []string `json:"reasons,omitempty"`
	// Unresolvable is set when no freeing on this node can cure it.
	Unresolvable bool `json:"unresolvable,omitempty"`
	// GPUs are each GPU's reason, empty when it could take the pod now.
	GPUs []GPUAnswer `json:"gpus,omitempty"`
	// Fix is the nearest way the pod fits here; nil when it fits or cannot.
	Fix *Fix `json:"fix,omitempty"`
}

// GPUAnswer is why one GPU cannot take the pod now.
type GPUAnswer struct {
	Index         int    `json:"index"`
	Model         string `json:"model"`
	Reason        string `json:"reason,omitempty"`
	FreeMilli     int64  `json:"freeMilli"`
	FreeMemoryMiB int64  `json:"freeMemoryMiB"`
}

// Fix is one way a pod would fit a node: GPUs to free and who holds them.
type Fix struct {
	Node string `json:"node"`
	// GPUs are the indexes of the GPUs the pod would take.
	GPUs []int `json:"gpus"`
	// FreeMilli and FreeMemoryMiB are what must be freed on a share's GPU
	// (0 for whole GPUs: all of each).
	FreeMilli     int64 `json:"freeMilli,omitempty"`
	FreeMemoryMiB int64 `json:"freeMemoryMiB,omitempty"`
	// Holders are the pods that would have to go.
	Holders []Holder `json:"holders"`
	// HostShort names host resources the node also lacks.
	HostShort []string `json:"hostShort,omitempty"`
	// Text says it in a sentence.
	Text string `json:"text"`

	cost fixCost
}

// fixCost orders fixes: the highest priority among the holders to go, then
// how many go, then the node's name.
type fixCost struct {
	maxPriority int32
	holders     int
}

func (c fixCost) compare(o fixCost) int {
	return cmp.Or(cmp.Compare(c.maxPriority, o.maxPriority), cmp.Compare(c.holders, o.holders))
}

// maxFixes bounds the fixes an explanation lists.
const maxFixes = 3

// Explain answers for the pod against the snapshot. gangs gives what the
// PodGroups say of their gangs, by "namespace/name", when known; a gang
// without an entry needs all its pods in the snapshot, on one GPU model.
func (s *Snapshot) Explain(pod *v1.Pod, pods []*v1.Pod, gangs map[string]GangSpec) Explanation {
	e := Explanation{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			e.SchedulerSays = c.Message
		}
	}
	d, claims, err := s.demandOf(pod)
	switch {
	case e.Node != "" && len(pod.Spec.ResourceClaims) > 0 && (errors.Is(err, errClaims) || err == nil && d.IsZero()):
		e.Verdict = "it is bound to node " + e.Node
		return e
	case errors.Is(err, errClaims):
		e.Verdict = err.Error()
		return e
	case err != nil:
		e.Verdict = "its GPU request is invalid: " + err.Error()
		return e
	case d.IsZero():
		e.Verdict = "it asks for no GPU: gpusched places it like any pod"
		return e
	}
	d.FillHost(pod)
	e.Demand = d.String()
	if e.Node != "" {
		e.Verdict = "it is bound to node " + e.Node
		return e
	}
	for _, p := range s.Pending {
		if p.Namespace == pod.Namespace && p.Name == pod.Name {
			e.QueuePosition = p.QueuePosition
		}
	}
	e.QueueLength = len(s.Pending)

	for i := range s.Nodes {
		if s.takes(i, claims) {
			e.Nodes = append(e.Nodes, s.answer(i, &d))
		}
	}
	slices.SortStableFunc(e.Nodes, compareAnswers)
	for _, a := range e.Nodes {
		if a.Fix != nil && len(e.Fixes) < maxFixes {
			e.Fixes = append(e.Fixes, *a.Fix)
		}
	}
	e.Verdict = s.verdict(&d, claims, e.Nodes)
	if g, ok := podgroup.GangOf(pod); ok {
		e.Gang = s.explainGang(pod.Namespace, g, pods, gangs)
		if e.Gang.Short != "" {
			// A member runs only with its gang: the gang's lack is the answer.
			e.Verdict = fmt.Sprintf("its gang %s cannot run yet: %s", e.Gang.Name, e.Gang.Short)
		}
	}
	return e
}

// ExplainPod is Explain for the snapshot's pod namespace/name, against the
// snapshot's own pods; false when the snapshot has no such pod.
func (s *Snapshot) ExplainPod(namespace, name string, gangs map[string]GangSpec) (Explanation, bool) {
	for _, p := range s.pods {
		if p.Namespace == namespace && p.Name == name {
			return s.Explain(p, s.pods, gangs), true
		}
	}
	return Explanation{}, false
}

// answer is node i's answer for the demand.
func (s *Snapshot) answer(i int, d *gpu.Demand) NodeAnswer {
	node, view := &s.Nodes[i], s.views[i]
	a := NodeAnswer{Node: node.Name}
	fit := gpu.Check(view, &gpu.Request{Demand: d})
	a.Reasons = fit.Reasons.Strings()
	a.Unresolvable = fit.Reasons.Unresolvable()
	host := hostShort(node, d)
	a.Reasons = append(a.Reasons, host...)
	if node.Unschedulable {
		a.Reasons = append(a.Reasons, "node is cordoned")
		a.Unresolvable = true
	}
	a.Fits = len(a.Reasons) == 0
	if view.Err == nil {
		for g := range view.Len() {
			r := gpu.DeviceReason(view, d, g)
			ga := GPUAnswer{Index: node.GPUs[g].Index, Model: node.GPUs[g].Model,
				FreeMilli: node.GPUs[g].FreeMilli(), FreeMemoryMiB: node.GPUs[g].FreeMemoryMiB()}
			if r != 0 {
				ga.Reason = r.String()
			}
			a.GPUs = append(a.GPUs, ga)
		}
	}
	// No fix on GPUs DRA allocates: the scheduler's preemption never frees
	// a claim's devices (docs/dra.md), so a fix there would be a false hope.
	if !a.Fits && !a.Unresolvable && !s.draNodes[i] {
		a.Fix = s.fix(i, d, host)
	}
	return a
}

// hostShort names what the node lacks of the pod's CPU and memory.
func hostShort(node *Node, d *gpu.Demand) []string {
	var out []string
	if d.MilliCPU > node.FreeMilliCPU {
		out = append(out, fmt.Sprintf("insufficient cpu (%dm free, %dm asked)", max(0, node.FreeMilliCPU), d.MilliCPU))
	}
	if d.HostMemoryMiB > node.FreeMemoryMiB {
		out = append(out, fmt.Sprintf("insufficient memory (%d MiB free, %d MiB asked)", max(0, node.FreeMemoryMiB), d.HostMemoryMiB))
	}
	return out
}

// compareAnswers puts nodes where the pod fits first, then nodes with a fix
// by its cost, then the rest, each by name.
func compareAnswers(a, b NodeAnswer) int {
	rank := func(x NodeAnswer) int {
		switch {
		case x.Fits:
			return 0
		case x.Fix != nil:
			return 1
		}
		return 2
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	if a.Fix != nil && b.Fix != nil {
		if c := a.Fix.cost.compare(b.Fix.cost); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.Node, b.Node)
}

// verdict sums the nodes' answers up in one sentence.
func (s *Snapshot) verdict(d *gpu.Demand, claims bool, answers []NodeAnswer) string {
	var fits []string
	for _, a := range answers {
		if a.Fits {
			fits = append(fits, a.Node)
		}
	}
	switch {
	case len(fits) > 0:
		return fmt.Sprintf("it fits now on %s; other filters (taints, affinity, ports) or the queue hold it, see the scheduler's message", listNames(fits, 3))
	case len(answers) == 0 && claims:
		return "fits nowhere in this cluster: no node publishes GPUs of the DRA driver " + s.dra.driver
	case len(answers) == 0 && slices.Contains(s.draNodes, true):
		return "fits nowhere in this cluster: no node has GPUs gpusched assigns; every node with GPUs publishes them through DRA (ask for them with a ResourceClaim, or as nvidia.com/gpu where a DeviceClass serves it)"
	case len(answers) == 0:
		return "fits nowhere in this cluster: no node has GPUs"
	case answers[0].Fix != nil:
		return "nothing fits now; nearest: " + answers[0].Fix.Text
	case claims && slices.ContainsFunc(answers, func(a NodeAnswer) bool { return !a.Unresolvable }):
		return "nothing fits now: the GPUs DRA publishes that could take it are held by claims, which free them when their pods end (the scheduler's preemption frees no DRA device)"
	}
	return "fits nowhere in this cluster: " + s.nowhere(d, claims)
}

// nowhere says which part of the demand no node can meet even when empty.
func (s *Snapshot) nowhere(d *gpu.Demand, claims bool) string {
	models := map[string]int{}
	var allowed, bigEnough, healthy, largestNode int
	var largestMemory int64
	for i := range s.Nodes {
		if !s.takes(i, claims) {
			continue
		}
		n := &s.Nodes[i]
		perNode := 0
		for _, g := range n.GPUs {
			models[g.Model]++
			if !d.AllowsModel(g.Model) {
				continue
			}
			allowed++
			largestMemory = max(largestMemory, g.MemoryMiB)
			if g.MemoryMiB < d.MemoryMiB {
				continue
			}
			bigEnough++
			if g.Unhealthy != "" {
				continue
			}
			healthy++
			if !n.Unschedulable {
				perNode++
			}
		}
		largestNode = max(largestNode, perNode)
	}
	switch {
	case allowed == 0:
		return fmt.Sprintf("no GPU model matches %v (the cluster has %s)", d.Models, modelList(models))
	case bigEnough == 0:
		return fmt.Sprintf("no allowed GPU has %d MiB of memory (the largest has %d MiB)", d.MemoryMiB, largestMemory)
	case healthy == 0:
		return "every GPU that matches is unhealthy"
	case largestNode < d.Count:
		return fmt.Sprintf("no schedulable node has %d suitable GPUs (the most on one node is %d)", d.Count, largestNode)
	}
	return "no node has the CPU or memory it asks beside its GPUs, or every node that could is cordoned"
}

func modelList(models map[string]int) string {
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(models)) {
		parts = append(parts, fmt.Sprintf("%d× %s", models[m], m))
	}
	if len(parts) == 0 {
		return "no GPUs"
	}
	return strings.Join(parts, ", ")
}

func listNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
