package defrag

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// AnnotationMovable on a Pod set to "true" opts the pod in to being moved
// by the defragmenter (Rules.Selector opts pods in by label instead).
const AnnotationMovable = "gpusched.io/movable"

// recreatingControllers are the owner kinds whose controllers create a
// replacement for an evicted pod.
var recreatingControllers = []string{"ReplicaSet", "StatefulSet", "Job", "ReplicationController"}

// Rules decide which bound pods the defragmenter may move. A pod may move
// only when all hold: its controller recreates it (recreatingControllers),
// it is opted in (AnnotationMovable, or Selector), it is in no gang, it
// holds GPUs gpusched assigned (a reservation can then hold its
// replacement's), it is not being deleted, and each PodDisruptionBudget
// that selects it allows a disruption now. The planner adds one rule of its own: never for a pod of
// lower priority (gpu.Planner).
type Rules struct {
	// Selector, when set, opts in the pods whose labels it matches, beside
	// those annotated.
	Selector labels.Selector
	// PDBs are the cluster's PodDisruptionBudgets.
	PDBs []*policyv1.PodDisruptionBudget
}

// Why says why pod may not move; "" when it may.
func (r *Rules) Why(pod *v1.Pod) string {
	if why := r.whyBesidesBudgets(pod); why != "" {
		return why
	}
	return r.budgetBlocks(pod)
}

// whyBesidesBudgets is Why without the disruption budgets' rule.
func (r *Rules) whyBesidesBudgets(pod *v1.Pod) string {
	ref := metav1.GetControllerOfNoCopy(pod)
	switch {
	case pod.DeletionTimestamp != nil:
		return "it is being deleted"
	case ref == nil || !slices.Contains(recreatingControllers, ref.Kind):
		return "no controller recreates it (" + strings.Join(recreatingControllers, ", ") + ")"
	case pod.Annotations[AnnotationMovable] != "true" && (r.Selector == nil || !r.Selector.Matches(labels.Set(pod.Labels))):
		return "it is not opted in (" + AnnotationMovable + "=true" + r.selectorNote() + ")"
	}
	if gang, ok := podgroup.GangOf(pod); ok {
		return "it is in gang " + gang + ", whose pods are never moved: one gone stops them all"
	}
	if _, holds := gpu.AssignmentOf(pod); !holds {
		return "it holds no GPU gpusched assigned: nothing could reserve where its replacement goes"
	}
	return ""
}

func (r *Rules) selectorNote() string {
	if r.Selector == nil || r.Selector.Empty() {
		return ""
	}
	return " or labels matching " + r.Selector.String()
}

// budgetBlocks names the PodDisruptionBudget that allows pod no disruption
// now; "" when none does. A budget whose status its controller has not
// computed for its current spec allows none.
func (r *Rules) budgetBlocks(pod *v1.Pod) string {
	for _, pdb := range r.PDBs {
		if pdb.Namespace != pod.Namespace || pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.DisruptionsAllowed < 1 {
			return fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption now", pdb.Namespace, pdb.Name)
		}
	}
	return ""
}
