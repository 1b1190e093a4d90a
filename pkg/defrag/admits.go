package defrag

import (
	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// admits reports whether node admits pod beside its GPUs, CPU and memory,
// which the planner weighs itself: the node is not cordoned, the pod's
// node selector and required node affinity match it, and the pod tolerates
// its NoSchedule and NoExecute taints. These are the scheduler's filters a
// plan most often meets; a plan that breaks another (ports, volumes, pod
// affinity) leaves its pod pending on the reserved node until the plan
// expires, and the scheduler then places it as it would any pod.
func admits(node *v1.Node, pod *v1.Pod) bool {
	if node.Spec.Unschedulable {
		return false
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, true)
	return !untolerated
}
