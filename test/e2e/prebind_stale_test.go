package e2e

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestPreBindStaleStatefulSet runs gpusched with GPUPlacement writing the
// assignment in PreBind and DefaultBinder binding (the chart's
// plugin.bind: false), against a real API server and the real statefulset
// controller, with the binds of the StatefulSet's pod web-0 refused by an
// admission policy:
//
//   - every failed bind leaves web-0 unbound, and once the bind is settled
//     (bindSettleAfter, 2s in preBindConfig) without an assignment (the
//     node agent would otherwise give its containers GPUs that are free in
//     the ledger, and a later bind without GPUPlacement would keep them);
//   - when web-0 is deleted, the controller creates it again under the same
//     name with a new UID, and PreBind's patch for the old pod is refused by
//     the API server rather than landing on the new one;
//   - once binds are allowed, the new web-0 binds with GPUs of its own.
func TestPreBindStaleStatefulSet(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	c.StartStatefulSetController(ctx, t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj())
	refuseBindingsOf(ctx, t, c, "web-0")
	startGPUSchedPreBind(ctx, t, c)

	template := gt.MakeGPUPod("web").GPUs(1).Obj()
	template.Spec.SchedulerName = schedulerName
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "web",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       template.Spec,
			},
		},
	}
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A bind refused after PreBind wrote the assignment: the event proves
	// PreBind ran and the bind failed; the assignment must then go.
	ev := testcluster.WaitForPodEvent(ctx, t, c.Client, "default", "web-0", "FailedScheduling", timeout)
	if !strings.Contains(ev.Message, "bindings of web-0 are refused") {
		t.Fatalf("web-0 failed scheduling for another reason: %s", ev.Message)
	}
	old := waitForUnassigned(ctx, t, c, "web-0", "")

	// The controller replaces a deleted web-0 under the same name.
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	replacement := waitForUnassigned(ctx, t, c, "web-0", old.UID)
	stale := gpu.Assignment{Node: "a100-0", Devices: []int{0}}
	patch, err := gpuplacement.AssignmentPatch(old.UID, &stale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("default").Patch(ctx, "web-0", types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
		t.Errorf("PreBind's patch for web-0 %s landed on its replacement %s", old.UID, replacement.UID)
	}
	if got := waitForUnassigned(ctx, t, c, "web-0", old.UID); got.UID != replacement.UID {
		t.Fatalf("web-0 was replaced again: %s", got.UID)
	}

	if err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "refuse-bindings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", "web-0", timeout)
	if bound.UID != replacement.UID {
		t.Fatalf("bound web-0 %s, want the replacement %s", bound.UID, replacement.UID)
	}
	if a, ok := gpu.AssignmentOf(bound); !ok || a.Node != bound.Spec.NodeName {
		t.Errorf("web-0 bound to %s with assignment %q", bound.Spec.NodeName, bound.Annotations[gpu.AnnotationAssigned])
	}
}

// refuseBindingsOf installs an admission policy that refuses every Binding
// of the named pod, and waits until the API server enforces it.
func refuseBindingsOf(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod string) {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-bindings"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "object.metadata.name != '" + pod + "'",
				Message:    "bindings of " + pod + " are refused",
			}},
		},
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-bindings"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "refuse-bindings",
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Binding of a pod that does not exist: refused by the policy once it
	// is enforced, else not found.
	probe := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "default"}, Target: v1.ObjectReference{Kind: "Node", Name: "nowhere"}}
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Client.CoreV1().Pods("default").Bind(ctx, probe, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "are refused"), nil
	})
	if err != nil {
		t.Fatalf("the policy refusing bindings of %s is not enforced: %v", pod, err)
	}
}

// waitForUnassigned waits until the pod named name, with a UID other than
// not, is unbound and without an assignment, and returns it. It watches the
// pod, so a state that lasts a moment (the assignment removed, the pod's
// next cycle writing a new one) is seen.
func waitForUnassigned(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, not types.UID) *v1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Without a resourceVersion the watch starts with the pod as it is.
	w, err := c.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last *v1.Pod
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*v1.Pod)
		if !ok || ev.Type == watch.Deleted || pod.UID == not {
			continue
		}
		last = pod
		if _, assigned := pod.Annotations[gpu.AnnotationAssigned]; pod.Spec.NodeName == "" && !assigned {
			return pod
		}
	}
	if last != nil {
		t.Fatalf("pod %s %s: bound to %q, assignment %q; want unbound without one", name, last.UID, last.Spec.NodeName, last.Annotations[gpu.AnnotationAssigned])
	}
	t.Fatalf("no pod %s other than %s within %v", name, not, timeout)
	return nil
}
