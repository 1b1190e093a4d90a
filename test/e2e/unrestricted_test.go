package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// unrestrictedPod is a pod no scheduler places, of the ServiceAccount sa in
// ns, annotated gpusched.io/gpu-unrestricted=value unless value is empty.
func unrestrictedPod(name, ns, sa, value string) *v1.Pod {
	w := gt.MakeGPUPod(name).Namespace(ns).SchedulerName("nobody")
	if value != "" {
		w = w.Annotation(agentnri.AnnotationUnrestricted, value)
	}
	pod := w.Obj()
	pod.Spec.ServiceAccountName = sa
	return pod
}

// checkUnrestricted checks the gpusched-unrestricted policy with the RBAC
// already applied (the agent's ServiceAccount agentUser granted through the
// ClusterRole role): a tenant who made a namespace and ServiceAccount named
// like NVIDIA's gets nothing by the name; only a pod whose ServiceAccount
// holds the verb "unrestricted" on gpus.gpusched.io may carry the
// annotation, it cannot be added later by an update or a Binding, and no
// one without the verb adds an ephemeral container to such a pod. It
// expects checkAdmission to have run (the intruder's grants, gpu-0).
func checkUnrestricted(t *testing.T, c *testcluster.Cluster, agentUser, role string) {
	t.Helper()
	ctx := context.Background()
	agentNS, agentSA, _ := strings.Cut(strings.TrimPrefix(agentUser, "system:serviceaccount:"), ":")
	intruder := impersonate(t, c, intruderServiceAccount, "")
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-operator"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ephemeral := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder-ephemeral"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"update", "patch"}}},
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, ephemeral, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder-ephemeral"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "intruder-ephemeral"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "intruder", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func(ns string) interface {
		Create(context.Context, *v1.Pod, metav1.CreateOptions) (*v1.Pod, error)
	} {
		return intruder.CoreV1().Pods(ns)
	}
	// The API server loads a new policy asynchronously: wait until it refuses.
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err = pods("gpu-operator").Create(ctx, unrestrictedPod("probe", "gpu-operator", "nvidia-dcgm-exporter", "true"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) {
			break
		}
	}
	refusal := []string{agentnri.AnnotationUnrestricted + "=true leaves the pod out of gpusched's node agent", "gpu-operator/nvidia-dcgm-exporter", role}

	_, err = pods("gpu-operator").Create(ctx, unrestrictedPod("dcgm", "gpu-operator", "nvidia-dcgm-exporter", "true"), metav1.CreateOptions{})
	assertRefused(t, "a pod in a namespace and of a ServiceAccount named like NVIDIA's", err, refusal...)
	_, err = pods("default").Create(ctx, unrestrictedPod("own", "default", "", "true"), metav1.CreateOptions{})
	assertRefused(t, "a tenant's pod of the default ServiceAccount", err, "default/default needs the verb 'unrestricted'")
	tolerating := unrestrictedPod("tolerating", "default", "", "")
	tolerating.Annotations = map[string]string{agentnri.AnnotationTolerateMissingAgent: "true"}
	_, err = pods("default").Create(ctx, tolerating, metav1.CreateOptions{})
	assertRefused(t, "a tenant's pod that tolerates a missing agent", err, agentnri.AnnotationTolerateMissingAgent+"=true leaves the pod out")
	_, err = pods("default").Create(ctx, unrestrictedPod("restricted", "default", "", "false"), metav1.CreateOptions{})
	assertAllowed(t, "anyone's pod with the annotation false", err)
	_, err = pods(agentNS).Create(ctx, unrestrictedPod("agent", agentNS, agentSA, "true"), metav1.CreateOptions{})
	assertAllowed(t, "a pod of the agent's ServiceAccount", err)

	createPlainPod(ctx, t, c, "later")
	_, err = patchAnnotation(ctx, intruder.CoreV1().Pods("default"), "later", agentnri.AnnotationUnrestricted, ptr.To("true"))
	assertRefused(t, "adding the annotation to a running tenant pod", err, "default/default needs the verb 'unrestricted'")
	createPlainPod(ctx, t, c, "bound-later")
	b := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bound-later", Annotations: map[string]string{agentnri.AnnotationUnrestricted: "true"}},
		Target: v1.ObjectReference{Kind: "Node", Name: "gpu-0"}}
	err = intruder.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{})
	assertRefused(t, "a Binding that carries the annotation", err, intruderServiceAccount+" needs the verb 'unrestricted'")

	agentPod, err := c.Client.CoreV1().Pods(agentNS).Get(ctx, "agent", metav1.GetOptions{})
	if err == nil {
		agentPod.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		_, err = intruder.CoreV1().Pods(agentNS).UpdateEphemeralContainers(ctx, "agent", agentPod, metav1.UpdateOptions{})
		assertRefused(t, "an ephemeral container in an unrestricted pod", err, "would run as the pod does", intruderServiceAccount)
	} else {
		t.Errorf("the agent's pod: %v", err)
	}

	// The administrator grants NVIDIA's ServiceAccount: its pod is admitted.
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dcgm-unrestricted"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "nvidia-dcgm-exporter", Namespace: "gpu-operator"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = pods("gpu-operator").Create(ctx, unrestrictedPod("dcgm", "gpu-operator", "nvidia-dcgm-exporter", "true"), metav1.CreateOptions{}); err == nil {
			break
		}
	}
	assertAllowed(t, "NVIDIA's ServiceAccount once granted", err)
}
