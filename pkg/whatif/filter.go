package whatif

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The reasons the kube-scheduler filters give, word for word, so that a
// what-if's message reads as the scheduler's FailedScheduling event (and
// the simulator's report) would.
const (
	// reasonUnschedulable is NodeUnschedulable's ErrReasonUnschedulable.
	reasonUnschedulable = "node(s) were unschedulable"
	// reasonTaint is TaintToleration's reason.
	reasonTaint = "node(s) had untolerated taint(s)"
	// reasonAffinity is NodeAffinity's ErrReasonPod.
	reasonAffinity = "node(s) didn't match Pod's node affinity/selector"
	// reasonConflict is NodeAffinity's PreFilter reason when the terms of
	// a pod's required node affinity name no node in common.
	reasonConflict = "pod affinity terms conflict"
	// reasonTooManyPods and "Insufficient <resource>" are NodeResourcesFit's.
	reasonTooManyPods = "Too many pods"
)

// The reasons as reject returns them, allocated once.
var (
	rejectUnschedulable = []string{reasonUnschedulable}
	rejectTaint         = []string{reasonTaint}
	rejectAffinity      = []string{reasonAffinity}
)

// noLog discards what the component helpers log.
var noLog = klog.Logger{}

// unschedulableTaint is the taint a pod must tolerate to land on a
// cordoned node (NodeUnschedulable).
var unschedulableTaint = v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}

// reject returns why the node cannot take the pod: the engine's GPU
// reasons, or else the other filters' reasons; neither when it can. The
// checks run in the order the simulator applies them, and the first that
// fails gives the reasons: the GPU screen (GPUPlacement's check, run
// before the Filter plugins for a pod with GPUs), then NodeUnschedulable,
// TaintToleration, NodeAffinity and NodeResourcesFit, in the framework's
// order of the default filters. The returned slice must not be changed.
func reject(p *newPod, n *nodeState) (gpu.Reasons, []string) {
	if !p.demand.IsZero() {
		if fit := gpu.Check(n.view, &gpu.Request{Demand: &p.demand}); fit.Reasons != 0 {
			return fit.Reasons, nil
		}
	}
	node := n.node
	tolerations := p.pod.Spec.Tolerations
	// The comparison operators of tolerations are alpha and off in 1.37.
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(noLog, tolerations, &unschedulableTaint, false) {
		return 0, rejectUnschedulable
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(noLog, node.Spec.Taints, tolerations, doNotSchedule, false); untolerated {
		return 0, rejectTaint
	}
	// A selector that does not parse matches nothing, as NodeAffinity has it.
	if match, _ := p.affinity.Match(node); !match {
		return 0, rejectAffinity
	}
	return 0, insufficient(&p.requests, n)
}

// doNotSchedule selects the taints TaintToleration filters on.
func doNotSchedule(t *v1.Taint) bool {
	return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
}

// insufficient is NodeResourcesFit's check: one reason per resource the
// node lacks, for the resources the pod requests, and the pod count;
// the resources GPUPlacement accounts (gpu.DemandResources) are ignored,
// as GPUResourcesFit and the profile's NodeResourcesFit args
// (ignoredResources) have it, except gpu.ResourceMilli on a node that
// advertises it, which GPUResourcesFit checks as the kubelet will.
func insufficient(req *resources, n *nodeState) []string {
	var out []string
	if n.pods+1 > n.alloc.pods {
		out = append(out, reasonTooManyPods)
	}
	free := func(alloc, used int64) int64 { return alloc - used }
	if req.milliCPU > 0 && req.milliCPU > free(n.alloc.milliCPU, n.used.milliCPU) {
		out = append(out, "Insufficient cpu")
	}
	if req.memory > 0 && req.memory > free(n.alloc.memory, n.used.memory) {
		out = append(out, "Insufficient memory")
	}
	if req.ephemeral > 0 && req.ephemeral > free(n.alloc.ephemeral, n.used.ephemeral) {
		out = append(out, "Insufficient ephemeral-storage")
	}
	for name, q := range req.scalar {
		_, advertised := n.alloc.scalar[name]
		checked := !slices.Contains(gpu.DemandResources, name) || (name == gpu.ResourceMilli && advertised)
		if q > 0 && checked && q > free(n.alloc.scalar[name], n.used.scalar[name]) {
			out = append(out, fmt.Sprintf("Insufficient %s", name))
		}
	}
	return out
}
