package e2e

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/test/testcluster"
)

// kubectlInstall says how to get kubectl when it is missing.
const kubectlInstall = "go build -o bin/kubectl k8s.io/kubernetes/cmd/kubectl"

// schedulerServiceAccount is the identity deploy/scheduler/ gives gpusched.
const schedulerServiceAccount = "system:serviceaccount:kube-system:gpusched"

// rbacCluster starts an API server that authorizes with RBAC and waits for
// what manifests refer to: the kube-system namespace and the system
// PriorityClasses. It returns the cluster and kubectl's path.
func rbacCluster(t *testing.T) (*testcluster.Cluster, string) {
	t.Helper()
	kubectl := findTool(t, "kubectl", "KUBECTL", kubectlInstall)
	ctx := context.Background()
	c := testcluster.Start(t, "--authorization-mode=RBAC")
	waitForNamespace(ctx, t, c, "kube-system")
	waitForPriorityClass(ctx, t, c, "system-cluster-critical")
	waitForPriorityClass(ctx, t, c, "system-node-critical")
	return c, kubectl
}

// TestDeployManifests applies every manifest in deploy/ to a real API server
// with `kubectl apply --dry-run=server` (deploy/scheduler/ and
// deploy/extender/ through their kustomizations, deploy/static-pod/ file by
// file), checks the scheduler's configuration files the way the scheduler
// reads them, and, with the RBAC objects applied for real, asks the API
// server what gpusched may and may not do (`kubectl auth can-i`): as the
// Deployment's ServiceAccount and as the static pod's user.
func TestDeployManifests(t *testing.T) {
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath
	covered := map[string]bool{}

	for _, dir := range []string{"deploy/scheduler", "deploy/extender"} {
		command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-k", dir)
		var k struct{ Resources []string }
		if err := yaml.Unmarshal(readRepoFile(t, dir, "kustomization.yaml"), &k); err != nil {
			t.Fatal(err)
		}
		covered[dir+"/kustomization.yaml"] = true
		for _, r := range k.Resources {
			covered[dir+"/"+r] = true
		}
	}
	objs := decodeObjects(t, command(t, nil, kubectl, "kustomize", "deploy/scheduler"))
	checkSchedulerDeployment(t, objs, 2, exampleProfiles)

	// Static pod: the pod and its config file, then its user's bindings.
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-f", "deploy/static-pod/gpusched.yaml")
	var pod v1.Pod
	findObject(t, decodeObjects(t, readRepoFile(t, "deploy", "static-pod", "gpusched.yaml")), "Pod", "gpusched", &pod)
	configPath := checkSchedulerArgs(t, pod.Spec.Containers[0].Args)
	if configPath != "/etc/kubernetes/gpusched-config.yaml" {
		t.Errorf("static pod --config=%s", configPath)
	}
	cfg := checkSchedulerConfig(t, "deploy/static-pod/gpusched-config.yaml", readRepoFile(t, "deploy", "static-pod", "gpusched-config.yaml"), exampleProfiles)
	if cfg.ClientConnection.Kubeconfig != "/etc/kubernetes/scheduler.conf" || !cfg.LeaderElection.LeaderElect {
		t.Errorf("static pod config: kubeconfig %q, leader election %v", cfg.ClientConnection.Kubeconfig, cfg.LeaderElection.LeaderElect)
	}
	checkSchedulerConfig(t, "deploy/extender/scheduler-config.yaml", readRepoFile(t, "deploy", "extender", "scheduler-config.yaml"), extenderProfile)
	covered["deploy/static-pod/gpusched.yaml"] = true
	covered["deploy/static-pod/gpusched-config.yaml"] = true
	covered["deploy/static-pod/rbac.yaml"] = true
	covered["deploy/extender/scheduler-config.yaml"] = true // the stock scheduler's, with gpusched's extender
	assertEveryManifestCovered(t, covered)

	command(t, nil, kubectl, kc, "apply", "-f", "deploy/scheduler/serviceaccount.yaml",
		"-f", "deploy/scheduler/role.yaml", "-f", "deploy/scheduler/rbac.yaml", "-f", "deploy/static-pod/rbac.yaml")
	assertAccess(t, kubectl, kc, schedulerServiceAccount, schedulerNeeds, schedulerMustNot)
	// The kube-scheduler's user also has the API server's
	// system::leader-locking-kube-scheduler Role: every Lease in kube-system.
	assertAccess(t, kubectl, kc, "system:kube-scheduler", schedulerNeeds, schedulerMustNot)
	assertAccess(t, kubectl, kc, schedulerServiceAccount, nil, []access{
		{"update", "leases.coordination.k8s.io/kube-controller-manager", "", "kube-system"},
	})
}

// assertEveryManifestCovered fails for a YAML file under deploy/ that the
// test does not apply or check, so a new manifest cannot go untested.
func assertEveryManifestCovered(t *testing.T, covered map[string]bool) {
	t.Helper()
	root := repoRoot()
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if !covered[filepath.ToSlash(rel)] {
			t.Errorf("%s is not applied by any test: add it to a kustomization or to TestDeployManifests", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// access is one question for `kubectl auth can-i`: verb, resource (with its
// group, and "/<name>" for one object, as kubectl spells them), subresource
// and namespace ("" for cluster scope).
type access struct{ verb, resource, subresource, namespace string }

// schedulerNeeds is what a kube-scheduler running gpusched does: read what
// it schedules against, bind pods and write their status and events, patch
// the assignment annotation, delete preemption victims, hold its Lease, and
// authenticate requests to its secure port.
var schedulerNeeds = []access{
	{"watch", "pods", "", ""},
	{"list", "nodes", "", ""},
	{"get", "nodes", "", ""},
	{"watch", "namespaces", "", ""},
	{"list", "persistentvolumeclaims", "", ""},
	{"list", "storageclasses.storage.k8s.io", "", ""},
	{"list", "csinodes.storage.k8s.io", "", ""},
	{"list", "poddisruptionbudgets.policy", "", ""},
	{"list", "replicasets.apps", "", ""},
	{"list", "resourceslices.resource.k8s.io", "", ""},
	{"create", "pods", "binding", "default"},
	{"patch", "pods", "status", "default"},
	{"patch", "pods", "", "default"},  // the assignment annotation (PreBind)
	{"delete", "pods", "", "default"}, // preemption evicts its victims by deleting them
	{"create", "events.events.k8s.io", "", "default"},
	{"patch", "events.events.k8s.io", "", "default"},
	{"create", "leases.coordination.k8s.io", "", "kube-system"},
	{"get", "leases.coordination.k8s.io/gpusched", "", "kube-system"},
	{"update", "leases.coordination.k8s.io/gpusched", "", "kube-system"},
	{"get", "configmaps/extension-apiserver-authentication", "", "kube-system"},
	{"create", "tokenreviews.authentication.k8s.io", "", ""},
	{"create", "subjectaccessreviews.authorization.k8s.io", "", ""},
}

// schedulerMustNot are things no scheduler needs.
var schedulerMustNot = []access{
	{"get", "secrets", "", "kube-system"},
	{"list", "secrets", "", "default"},
	{"deletecollection", "pods", "", "default"},
	{"create", "pods", "", "default"},
	{"update", "pods", "", "default"},
	{"create", "pods", "eviction", "default"},
	{"update", "nodes", "", ""},
	{"delete", "nodes", "", ""},
	{"get", "configmaps/kubeadm-config", "", "kube-system"},
	{"create", "deployments.apps", "", "kube-system"},
	{"create", "clusterrolebindings.rbac.authorization.k8s.io", "", ""},
}

// assertAccess asks the API server, impersonating user, whether each of
// allowed is permitted and each of denied is not.
func assertAccess(t *testing.T, kubectl, kc, user string, allowed, denied []access) {
	t.Helper()
	check := func(a access, want bool) {
		args := []string{kc, "auth", "can-i", a.verb, a.resource, "--as=" + user}
		if a.subresource != "" {
			args = append(args, "--subresource="+a.subresource)
		}
		if a.namespace != "" {
			args = append(args, "--namespace="+a.namespace)
		}
		out, err := tryCommand(nil, kubectl, args...)
		answer := strings.TrimSpace(string(out))
		if answer != "yes" && answer != "no" {
			t.Fatalf("kubectl %s: %q, %v", strings.Join(args[1:], " "), answer, err)
		}
		if got := answer == "yes"; got != want {
			t.Errorf("%s may %s %s %s in %q: %v, want %v", user, a.verb, a.resource, a.subresource, a.namespace, got, want)
		}
	}
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range denied {
		check(a, false)
	}
}
