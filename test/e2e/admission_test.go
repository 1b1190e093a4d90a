package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// The identity deploy/agent/ gives the agent, and one that is none of
// gpusched's but may change pods, bindings and Nodes as far as RBAC goes.
const (
	agentServiceAccount    = "system:serviceaccount:gpusched-system:gpusched-agent"
	intruderServiceAccount = "system:serviceaccount:default:intruder"
)

// nodeNameExtra is the user extra a ServiceAccount token bound to a pod
// carries: the pod's node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// writers are the identities an admission policy rendering lets write the
// two annotations.
type writers struct{ scheduler, extender, agent string }

// TestAdmissionPolicy applies deploy/admission/ and the RBAC of the
// scheduler, the extender and the agent (deploy/agent/ whole) to a real API
// server that authorizes with RBAC, checks the policies' decisions for each
// identity (checkAdmission), then runs the gpusched scheduler as its
// ServiceAccount and sees it bind a GPU pod with its assignment through the
// policy.
func TestAdmissionPolicy(t *testing.T) {
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath
	command(t, nil, kubectl, kc, "apply", "-f", "deploy/scheduler/serviceaccount.yaml", "-f", "deploy/scheduler/role.yaml",
		"-f", "deploy/scheduler/rbac.yaml", "-f", "deploy/extender/serviceaccount.yaml", "-f", "deploy/extender/rbac.yaml")
	command(t, nil, kubectl, kc, "apply", "-k", "deploy/agent")
	command(t, nil, kubectl, kc, "apply", "-k", "deploy/admission")
	checkAdmission(t, c, writers{schedulerServiceAccount, extenderServiceAccount, agentServiceAccount})
	checkUnrestricted(t, c, agentServiceAccount, "gpusched-gpu-unrestricted")

	t.Run("the scheduler binds as its ServiceAccount", func(t *testing.T) {
		ctx := context.Background()
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Obj())
		startGPUSchedAs(ctx, t, c, schedulerServiceAccount)
		createPod(ctx, t, c, gt.MakeGPUPod("train").GPUs(2).Obj())
		if a := assignmentOf(ctx, t, c, "train"); a.Node != "a100-0" || len(a.Devices) != 2 {
			t.Errorf("assignment %+v, want 2 GPUs on a100-0", a)
		}
	})
}

// checkAdmission checks, against policies already applied, that only w's
// identities write the two annotations: pods created, changed (also through
// pods/status) or bound with gpusched.io/gpu-assigned by another
// ServiceAccount are refused with a message naming the annotation and its
// writers, and the scheduler's and the extender's are allowed; Nodes'
// gpusched.io/gpu-devices is written only by w.agent with its node's name.
func checkAdmission(t *testing.T, c *testcluster.Cluster, w writers) {
	t.Helper()
	ctx := context.Background()
	grantIntruder(ctx, t, c)
	for _, name := range []string{"gpu-0", "gpu-1"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).Obj())
	}
	intruder := impersonate(t, c, intruderServiceAccount, "")
	waitForPolicies(ctx, t, intruder)
	assignment := "node=gpu-0;gpus=0"
	refusal := []string{gpu.AnnotationAssigned, w.scheduler, w.extender, intruderServiceAccount + " may not"}

	t.Run("pods", func(t *testing.T) {
		_, err := intruder.CoreV1().Pods("default").Create(ctx, plainPod("own", assignment), metav1.CreateOptions{})
		assertRefused(t, "another ServiceAccount creating a pod with the assignment", err, refusal...)

		createPlainPod(ctx, t, c, "victim")
		scheduler := impersonate(t, c, w.scheduler, "")
		_, err = patchAnnotation(ctx, scheduler.CoreV1().Pods("default"), "victim", gpu.AnnotationAssigned, &assignment)
		assertAllowed(t, "the scheduler patching the assignment (PreBind)", err)

		other := "node=gpu-0;gpus=1"
		_, err = patchAnnotation(ctx, intruder.CoreV1().Pods("default"), "victim", gpu.AnnotationAssigned, &other)
		assertRefused(t, "another ServiceAccount changing the assignment", err, refusal...)
		_, err = patchAnnotation(ctx, intruder.CoreV1().Pods("default"), "victim", gpu.AnnotationAssigned, nil)
		assertRefused(t, "another ServiceAccount removing the assignment", err, refusal...)
		pod, err := patchAnnotation(ctx, intruder.CoreV1().Pods("default"), "victim", "team", ptr.To("ml"))
		assertAllowed(t, "another ServiceAccount changing another annotation", err)
		if err == nil {
			pod.Annotations[gpu.AnnotationAssigned] = other
			_, err = intruder.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			assertRefused(t, "another ServiceAccount changing the assignment through pods/status", err, refusal...)
		}
		if got := getPod(ctx, t, c, "victim").Annotations[gpu.AnnotationAssigned]; got != assignment {
			t.Errorf("victim's assignment is %q, want %q", got, assignment)
		}
	})

	t.Run("bindings", func(t *testing.T) {
		for _, name := range []string{"bind-intruder", "bind-plain", "bind-scheduler", "bind-extender"} {
			createPlainPod(ctx, t, c, name)
		}
		err := bind(ctx, intruder, "bind-intruder", assignment)
		assertRefused(t, "another ServiceAccount binding with the assignment", err, refusal...)
		assertAllowed(t, "another ServiceAccount binding without the assignment", bind(ctx, intruder, "bind-plain", ""))
		for name, user := range map[string]string{"bind-scheduler": w.scheduler, "bind-extender": w.extender} {
			assertAllowed(t, user+" binding with the assignment", bind(ctx, impersonate(t, c, user, ""), name, assignment))
			if pod := getPod(ctx, t, c, name); pod.Spec.NodeName != "gpu-0" || pod.Annotations[gpu.AnnotationAssigned] != assignment {
				t.Errorf("%s: bound to %q with assignment %q", name, pod.Spec.NodeName, pod.Annotations[gpu.AnnotationAssigned])
			}
		}
		if pod := getPod(ctx, t, c, "bind-intruder"); pod.Spec.NodeName != "" {
			t.Errorf("bind-intruder is bound to %s", pod.Spec.NodeName)
		}
	})

	t.Run("nodes", func(t *testing.T) {
		devices := `[{"index":0,"uuid":"GPU-0","model":"NVIDIA-A100-SXM4-80GB","memoryMiB":81920}]`
		nodes := func(user, node string) patcher[*v1.Node] { return impersonate(t, c, user, node).CoreV1().Nodes() }
		_, err := patchAnnotation(ctx, nodes(intruderServiceAccount, ""), "gpu-0", gpu.AnnotationDevices, &devices)
		assertRefused(t, "another ServiceAccount writing the inventory", err,
			gpu.AnnotationDevices, "node gpu-0", w.agent, intruderServiceAccount+" may not")
		_, err = patchAnnotation(ctx, nodes(intruderServiceAccount, "gpu-0"), "gpu-0", gpu.AnnotationDevices, &devices)
		assertRefused(t, "another ServiceAccount on that node writing the inventory", err, intruderServiceAccount+" may not")
		_, err = patchAnnotation(ctx, nodes(w.agent, "gpu-1"), "gpu-0", gpu.AnnotationDevices, &devices)
		assertRefused(t, "the agent of another node writing the inventory", err, "node gpu-0", "this agent runs on node gpu-1")
		_, err = patchAnnotation(ctx, nodes(w.agent, ""), "gpu-0", gpu.AnnotationDevices, &devices)
		assertRefused(t, "the agent without a node name writing the inventory", err, "carries no node name")
		_, err = patchAnnotation(ctx, nodes(w.agent, "gpu-0"), "gpu-0", gpu.AnnotationDevices, &devices)
		assertAllowed(t, "the agent of gpu-0 writing its inventory", err)
		// Nothing else of a Node, its own included: one compromised GPU node
		// must not taint, relabel or re-annotate the cluster.
		agentOnly := w.agent + " may change only gpusched.io/gpu-devices of a Node"
		for _, c := range []struct{ what, patch, says string }{
			{"a label", `{"metadata":{"labels":{"nvidia.com/gpu.product":"H100"}}}`, "labels"},
			{"a taint", `{"spec":{"taints":[{"key":"evict","effect":"NoExecute"}]}}`, "the spec"},
			{"another annotation", `{"metadata":{"annotations":{"team":"agent"}}}`, "other annotations"},
			{"its inventory and a label at once", `{"metadata":{"labels":{"x":"y"},"annotations":{"gpusched.io/gpu-devices":"[]"}}}`, "labels"},
		} {
			_, err = nodes(w.agent, "gpu-0").Patch(ctx, "gpu-0", types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
			assertRefused(t, "the agent of gpu-0 changing "+c.what+" of its Node", err, agentOnly, "changes "+c.says, "of node gpu-0")
		}
		_, err = patchAnnotation(ctx, nodes(intruderServiceAccount, ""), "gpu-0", "team", ptr.To("ml"))
		assertAllowed(t, "another ServiceAccount changing another annotation", err)
		_, err = intruder.CoreV1().Nodes().Create(ctx, gt.MakeGPUNode("gpu-2").Annotation(gpu.AnnotationDevices, devices).Obj(), metav1.CreateOptions{})
		assertRefused(t, "another ServiceAccount creating a Node with an inventory", err, gpu.AnnotationDevices, "node gpu-2")
		if got := getNode(ctx, t, c, "gpu-0").Annotations[gpu.AnnotationDevices]; got != devices {
			t.Errorf("gpu-0's inventory is %q, want the agent's %q", got, devices)
		}
	})
}

// grantIntruder lets intruderServiceAccount do, as far as RBAC goes,
// everything that could write the annotations, so what refuses it is the
// policy.
func grantIntruder(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "create", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/binding", "bindings"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "create", "update", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "intruder"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "intruder", Namespace: "default"}},
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForPolicies waits until both policies refuse the intruder: the API
// server loads new policies asynchronously. It asks with dry runs.
func waitForPolicies(ctx context.Context, t *testing.T, intruder kubernetes.Interface) {
	t.Helper()
	dryRun := []string{metav1.DryRunAll}
	var podErr, nodeErr error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, podErr = intruder.CoreV1().Pods("default").Create(ctx, plainPod("probe", "node=gpu-0;gpus=0"), metav1.CreateOptions{DryRun: dryRun})
		_, nodeErr = intruder.CoreV1().Nodes().Create(ctx, gt.MakeGPUNode("probe").Annotation(gpu.AnnotationDevices, "[]").Obj(), metav1.CreateOptions{DryRun: dryRun})
		if apierrors.IsForbidden(podErr) && apierrors.IsForbidden(nodeErr) {
			return
		}
	}
	t.Fatalf("the admission policies do not refuse the intruder after %v: pod %v, node %v", timeout, podErr, nodeErr)
}

// impersonate returns a client acting as user, with node as its
// nodeNameExtra when not empty, as a pod's bound token on that node would.
func impersonate(t *testing.T, c *testcluster.Cluster, user, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.RestConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// startGPUSchedAs runs the gpusched scheduler with the example configuration
// as user, through a kubeconfig that impersonates it.
func startGPUSchedAs(ctx context.Context, t *testing.T, c *testcluster.Cluster, user string) *testcluster.Scheduler {
	t.Helper()
	kubeconfig, err := clientcmd.LoadFromFile(c.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range kubeconfig.AuthInfos {
		auth.Impersonate = user
	}
	as := *c
	as.KubeconfigPath = filepath.Join(t.TempDir(), "kubeconfig-as-scheduler")
	if err := clientcmd.WriteToFile(*kubeconfig, as.KubeconfigPath); err != nil {
		t.Fatal(err)
	}
	return as.StartScheduler(ctx, t, exampleConfig(t), plugins.CommandOptions()...)
}

// patcher is the part of a pods or nodes client patchAnnotation uses.
type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// patchAnnotation sets the annotation to *value, or removes it when value is
// nil, with a JSON merge patch.
func patchAnnotation[T any](ctx context.Context, client patcher[T], name, key string, value *string) (T, error) {
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	return client.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
}

// bind binds the pod to gpu-0 with a Binding carrying assignment as its
// gpusched.io/gpu-assigned annotation, or no annotation when it is empty.
func bind(ctx context.Context, client kubernetes.Interface, pod, assignment string) error {
	b := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod}, Target: v1.ObjectReference{Kind: "Node", Name: "gpu-0"}}
	if assignment != "" {
		b.Annotations = map[string]string{gpu.AnnotationAssigned: assignment}
	}
	return client.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{})
}

// plainPod is a pod no scheduler places (its scheduler does not run), with
// the assignment annotation when assignment is not empty.
func plainPod(name, assignment string) *v1.Pod {
	w := gt.MakeGPUPod(name).SchedulerName("nobody")
	if assignment != "" {
		w = w.Annotation(gpu.AnnotationAssigned, assignment)
	}
	return w.Obj()
}

func createPlainPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, plainPod(name, ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func getPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) *v1.Pod {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func getNode(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) *v1.Node {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// assertRefused checks that err is the admission policy's refusal (403,
// ValidatingAdmissionPolicy) and that its message has each of parts.
func assertRefused(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("%s: error %v, want the admission policy's refusal", what, err)
		return
	}
	containsAll(t, what+": the refusal", err.Error(), parts...)
}

func assertAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}
