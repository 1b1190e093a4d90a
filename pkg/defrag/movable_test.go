package defrag

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// TestRules tries the ways a tenant's pod might be moved against its
// owner's will: each pod below breaks exactly one rule, and Why names it.
func TestRules(t *testing.T) {
	held := gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 500}
	movable := func() *gt.PodWrapper {
		return gt.MakeGPUPod("p").Namespace("team").Label("app", "infer").OwnedBy("ReplicaSet", "infer-1", "rs-uid").
			Annotation(AnnotationMovable, "true").Node("n").Milli(500).Assigned(held)
	}
	budget := func(name string, allowed int32, observed int64) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Generation: 1},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "infer"}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, ObservedGeneration: observed},
		}
	}
	noGPU := movable().Obj()
	delete(noGPU.Annotations, gpu.AnnotationAssigned)
	deleting := movable().Obj()
	deleting.DeletionTimestamp = &metav1.Time{}
	bare := movable().Obj()
	bare.OwnerReferences = nil
	daemon := movable().Obj()
	daemon.OwnerReferences[0].Kind = "DaemonSet"
	workload := movable().Obj()
	group := "train"
	workload.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}

	cases := []struct {
		name  string
		pod   *v1.Pod
		rules Rules
		want  string // "" when the pod may move
	}{
		{"opted in by annotation", movable().Obj(), Rules{}, ""},
		{"opted in by the admin's selector", gt.MakeGPUPod("p").Label("app", "infer").OwnedBy("Job", "j", "j-uid").Node("n").Assigned(held).Obj(),
			Rules{Selector: labels.SelectorFromSet(labels.Set{"app": "infer"})}, ""},
		{"not opted in", gt.MakeGPUPod("p").OwnedBy("ReplicaSet", "rs", "rs-uid").Node("n").Obj(), Rules{}, "not opted in"},
		{"opted in with another value", movable().Annotation(AnnotationMovable, "yes").Obj(), Rules{}, "not opted in"},
		{"no controller", bare, Rules{}, "no controller recreates it"},
		{"a DaemonSet's pod", daemon, Rules{}, "no controller recreates it"},
		{"being deleted", deleting, Rules{}, "being deleted"},
		{"holds no GPU gpusched assigned", noGPU, Rules{}, "holds no GPU"},
		{"in a PodGroup", movable().Label(podgroup.LabelPodGroup, "train").Obj(), Rules{}, "in gang train"},
		{"in a Workload API gang", workload, Rules{}, "in gang workload:train"},
		{"a budget with room", movable().Obj(), Rules{PDBs: []*policyv1.PodDisruptionBudget{budget("ok", 1, 1)}}, ""},
		{"a budget of no disruption", movable().Obj(), Rules{PDBs: []*policyv1.PodDisruptionBudget{budget("zero", 0, 1)}},
			"PodDisruptionBudget team/zero allows no disruption"},
		{"a budget not computed yet", movable().Obj(), Rules{PDBs: []*policyv1.PodDisruptionBudget{budget("new", 3, 0)}},
			"PodDisruptionBudget team/new allows no disruption"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.rules.Why(c.pod)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("Why = %q, want %q", got, c.want)
			}
		})
	}
	// A budget of another namespace, or selecting other pods, does not apply.
	other := budget("zero", 0, 1)
	other.Namespace = "elsewhere"
	elsewhere := budget("zero", 0, 1)
	elsewhere.Spec.Selector.MatchLabels = map[string]string{"app": "train"}
	if got := (&Rules{PDBs: []*policyv1.PodDisruptionBudget{other, elsewhere}}).Why(movable().Obj()); got != "" {
		t.Errorf("budgets of other pods: Why = %q", got)
	}
}

func TestAdmits(t *testing.T) {
	node := gt.MakeGPUNode("n").Label("pool", "a").Obj()
	tainted := gt.MakeGPUNode("n").Obj()
	tainted.Spec.Taints = []v1.Taint{{Key: "gpu", Value: "reserved", Effect: v1.TaintEffectNoSchedule}}
	cordoned := gt.MakeGPUNode("n").Obj()
	cordoned.Spec.Unschedulable = true
	pod := gt.MakeGPUPod("p").Obj()
	selecting := gt.MakeGPUPod("p").Obj()
	selecting.Spec.NodeSelector = map[string]string{"pool": "b"}
	tolerating := gt.MakeGPUPod("p").Obj()
	tolerating.Spec.Tolerations = []v1.Toleration{{Key: "gpu", Operator: v1.TolerationOpEqual, Value: "reserved", Effect: v1.TaintEffectNoSchedule}}
	cases := []struct {
		name string
		node *v1.Node
		pod  *v1.Pod
		want bool
	}{
		{"plain", node, pod, true},
		{"node selector of another pool", node, selecting, false},
		{"untolerated taint", tainted, pod, false},
		{"tolerated taint", tainted, tolerating, true},
		{"cordoned", cordoned, pod, false},
	}
	for _, c := range cases {
		if got := admits(c.node, c.pod); got != c.want {
			t.Errorf("%s: admits = %v, want %v", c.name, got, c.want)
		}
	}
}
