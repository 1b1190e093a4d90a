package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/pkg/extender"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// extenderServiceAccount is the identity deploy/extender/ gives the extender.
const extenderServiceAccount = "system:serviceaccount:kube-system:gpusched-extender"

// TestExtenderDeployment checks deploy/extender/ against a real API server
// that authorizes with RBAC: every manifest of its kustomization is accepted
// with strict field validation (the RBAC objects are created, the others
// created in dry-run), the extender then runs with exactly the
// ServiceAccount's permissions and the Deployment's arguments, and the stock
// scheduler with scheduler-config.yaml binds GPU pods through it. Access
// reviews show what the ServiceAccount may not do.
func TestExtenderDeployment(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, "--authorization-mode=RBAC")
	waitForNamespace(ctx, t, c, "kube-system")
	deployment := applyKustomization(ctx, t, c.RestConfig)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj())

	opts := extenderOptionsFrom(t, deployment)
	if !opts.LeaderElect {
		t.Error("the Deployment runs the extender without --leader-elect")
	}
	opts.BindAddress = freeLoopbackAddr(t)
	asExtender := rest.CopyConfig(c.RestConfig)
	asExtender.Impersonate = rest.ImpersonationConfig{
		UserName: extenderServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	startExtenderAs(ctx, t, asExtender, opts)
	c.StartScheduler(ctx, t, extenderConfig(t, opts.BindAddress, true))

	createStockPod(ctx, t, c, gt.MakeGPUPod("whole").GPUs(1).Obj())
	createStockPod(ctx, t, c, gt.MakeGPUPod("share").Milli(300).GPUMemory("8Gi").Obj())
	whole, share := assignmentOf(ctx, t, c, "whole"), assignmentOf(ctx, t, c, "share")
	if whole.Devices[0] == share.Devices[0] {
		t.Errorf("one GPU for a whole-GPU pod and a share: %s, %s", whole.String(), share.String())
	}

	for _, tc := range []struct {
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "gpusched-extender"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "pods", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler"}, false},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: extenderServiceAccount, Groups: asExtender.Impersonate.Groups, ResourceAttributes: &tc.attrs,
		}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%+v: allowed %v, want %v", tc.attrs, got.Status.Allowed, tc.allowed)
		}
	}
}

// applyKustomization creates the resources listed in
// deploy/extender/kustomization.yaml with strict field validation: the
// ServiceAccount and RBAC objects for real, the rest in dry-run. It returns
// the Deployment.
func applyKustomization(ctx context.Context, t *testing.T, config *rest.Config) *appsv1.Deployment {
	t.Helper()
	var kustomization struct{ Resources []string }
	if err := yaml.Unmarshal(readRepoFile(t, "deploy", "extender", "kustomization.yaml"), &kustomization); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	var deployment *appsv1.Deployment
	for _, file := range kustomization.Resources {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(readRepoFile(t, "deploy", "extender", file)), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, gvk, err)
			}
			opts := metav1.CreateOptions{FieldValidation: "Strict"}
			switch gvk.Kind {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			default:
				opts.DryRun = []string{metav1.DryRunAll}
			}
			var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				client = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
			}
			if _, err := client.Create(ctx, obj, opts); err != nil {
				t.Fatalf("%s: %s %s: %v", file, gvk.Kind, obj.GetName(), err)
			}
			if gvk.Kind == "Deployment" {
				deployment = &appsv1.Deployment{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if deployment == nil {
		t.Fatal("the kustomization has no Deployment")
	}
	return deployment
}

// extenderOptionsFrom parses the arguments of the Deployment's extender
// container into Options, as the command does (klog's flags aside).
func extenderOptionsFrom(t *testing.T, d *appsv1.Deployment) *extender.Options {
	t.Helper()
	containers := d.Spec.Template.Spec.Containers
	i := slices.IndexFunc(containers, func(c v1.Container) bool { return c.Name == "extender" })
	if i < 0 {
		t.Fatal("the Deployment has no extender container")
	}
	opts := extender.NewOptions()
	fs := pflag.NewFlagSet("gpusched-extender", pflag.ContinueOnError)
	opts.AddFlags(fs)
	var args []string
	for _, a := range containers[i].Args {
		if !strings.HasPrefix(a, "--v=") {
			args = append(args, a)
		}
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the Deployment's arguments: %v", err)
	}
	if err := opts.Validate(); err != nil {
		t.Fatalf("the Deployment's arguments: %v", err)
	}
	return opts
}

// waitForNamespace waits until the API server has created a system namespace.
func waitForNamespace(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("namespace %s: %v", name, err)
		}
	}
}
