package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	"github.com/gpusched/gpusched/pkg/gpu"
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
// scheduler with scheduler-config.yaml binds GPU pods through it over mutual
// TLS. A tenant that reaches the extender's port is refused: without the
// scheduler's client certificate it can neither read the GPU allocation
// nor bind, and with it, a bind of a pod of another scheduler is refused.
// Access reviews show what the ServiceAccount may not do.
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
	if opts.ClientCAFile == "" || opts.TLSCertFile == "" || len(opts.ClientNames) == 0 {
		t.Error("the Deployment runs the extender without mutual TLS for a named client")
	}
	// The Secret's files, as `gpusched-extender certificates` writes them.
	certDir := filepath.Join(t.TempDir(), "certs")
	err := extender.WriteCertificates(certDir, extender.CertificateRequest{
		ServerNames: []string{"gpusched-extender.kube-system.svc", "127.0.0.1"}, ClientName: extender.DefaultClient, ValidFor: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*string{&opts.TLSCertFile, &opts.TLSPrivateKeyFile, &opts.ClientCAFile} {
		*f = filepath.Join(certDir, filepath.Base(*f))
	}
	opts.BindAddress = freeLoopbackAddr(t)
	asExtender := rest.CopyConfig(c.RestConfig)
	asExtender.Impersonate = rest.ImpersonationConfig{
		UserName: extenderServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	startExtenderAs(ctx, t, asExtender, opts)
	c.StartScheduler(ctx, t, extenderTLSConfig(t, opts.BindAddress, certDir))

	createStockPod(ctx, t, c, gt.MakeGPUPod("whole").GPUs(1).Obj())
	createStockPod(ctx, t, c, gt.MakeGPUPod("share").Milli(300).GPUMemory("8Gi").Obj())
	whole, share := assignmentOf(ctx, t, c, "whole"), assignmentOf(ctx, t, c, "share")
	if whole.Devices[0] == share.Devices[0] {
		t.Errorf("one GPU for a whole-GPU pod and a share: %s, %s", whole.String(), share.String())
	}
	checkExtenderCallers(ctx, t, c, "https://"+opts.BindAddress, certDir)

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

// checkExtenderCallers tries to use the extender at base the ways a tenant
// that reaches its port would: a pod of a scheduler that never calls the
// extender ("nobody") must stay unbound whether the bind comes without a
// client certificate (401) or with the scheduler's (refused: not its
// scheduler's pod), and filter must not disclose the GPUs without one.
func checkExtenderCallers(ctx context.Context, t *testing.T, c *testcluster.Cluster, base, certDir string) {
	t.Helper()
	pod := gt.MakeGPUPod("tenant").GPUs(1).Obj()
	pod.UID, pod.Spec.SchedulerName = "", "nobody"
	created, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bind := fmt.Sprintf(`{"PodName":"tenant","PodNamespace":"default","PodUID":%q,"Node":"a100-0"}`, created.UID)
	filter := `{"Pod":{"metadata":{"name":"tenant","namespace":"default"}},"NodeNames":["a100-0"]}`
	for _, tc := range []struct {
		name, path, body string
		withCert         bool
		wantCode         int
		wantBody         string
	}{
		{"a bind without a client certificate", "/bind", bind, false, http.StatusUnauthorized, "client certificate required"},
		{"a filter without a client certificate", "/filter", filter, false, http.StatusUnauthorized, "client certificate required"},
		{"a bind of another scheduler's pod", "/bind", bind, true, http.StatusOK, `its spec.schedulerName is \"nobody\"`},
	} {
		code, body := postExtender(t, base+tc.path, tc.body, certDir, tc.withCert)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, code, body, tc.wantCode, tc.wantBody)
		}
	}
	got, err := c.Client.CoreV1().Pods("default").Get(ctx, "tenant", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" || got.Annotations[gpu.AnnotationAssigned] != "" {
		t.Errorf("the tenant's pod was bound to %q with GPUs %q", got.Spec.NodeName, got.Annotations[gpu.AnnotationAssigned])
	}
}

// postExtender POSTs body over TLS, trusting certDir's CA and presenting
// its scheduler certificate when withCert.
func postExtender(t *testing.T, url, body, certDir string, withCert bool) (int, string) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(certDir, extender.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, extender.ClientCert), filepath.Join(certDir, extender.ClientKey))
		if err != nil {
			t.Fatal(err)
		}
		config.Certificates = []tls.Certificate{cert}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: config}}
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
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
