package e2e

import (
	"context"
	"io/fs"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/test/testcluster"
)

// kubectlInstall says how to get kubectl when it is missing.
const kubectlInstall = "go build -o bin/kubectl k8s.io/kubernetes/cmd/kubectl"

// schedulerServiceAccount is the identity deploy/scheduler/ gives gpusched.
const schedulerServiceAccount = "system:serviceaccount:kube-system:gpusched"

// podGroupCRD is the PodGroup CRD gang scheduling needs.
const podGroupCRD = "deploy/crds/scheduling.x-k8s.io_podgroups.yaml"

// rbacCluster starts an API server that authorizes with RBAC and waits for
// what manifests refer to: the kube-system namespace and the system
// PriorityClasses. It installs the PodGroup CRD, whose resource the access
// checks name (kubectl resolves it through discovery). It returns the cluster
// and kubectl's path.
func rbacCluster(t *testing.T) (*testcluster.Cluster, string) {
	t.Helper()
	kubectl := findTool(t, "kubectl", "KUBECTL", kubectlInstall)
	ctx := context.Background()
	c := testcluster.Start(t, "--authorization-mode=RBAC")
	waitForNamespace(ctx, t, c, "kube-system")
	waitForPriorityClass(ctx, t, c, "system-cluster-critical")
	waitForPriorityClass(ctx, t, c, "system-node-critical")
	kc := "--kubeconfig=" + c.KubeconfigPath
	command(t, nil, kubectl, kc, "apply", "-f", podGroupCRD)
	command(t, nil, kubectl, kc, "wait", "--for=condition=Established", "--timeout=30s", "crd/podgroups.scheduling.x-k8s.io")
	return c, kubectl
}

// TestDeployManifests applies every manifest in deploy/ to a real API server
// with `kubectl apply --dry-run=server` (deploy/scheduler/ and
// deploy/extender/ through their kustomizations, the preemption component
// through an overlay of deploy/scheduler/, deploy/static-pod/ file by file),
// checks the scheduler's configuration files the way the scheduler reads
// them, and, with the RBAC objects applied for real, asks the API server
// what gpusched may and may not do (`kubectl auth can-i`): as the
// Deployment's ServiceAccount, without and with the preemption component,
// and as the static pod's user.
func TestDeployManifests(t *testing.T) {
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath
	covered := map[string]bool{}

	withPreemption := preemptionOverlay(t)
	for _, dir := range []string{"deploy/scheduler", "deploy/extender", withPreemption, "deploy/dashboard", "deploy/defragmenter"} {
		command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-k", dir)
	}
	for _, dir := range []string{"deploy/scheduler", "deploy/extender", "deploy/scheduler/preemption", "deploy/dashboard", "deploy/defragmenter"} {
		for _, f := range kustomizationFiles(t, dir) {
			covered[f] = true
		}
	}
	objs := decodeObjects(t, command(t, nil, kubectl, "kustomize", "deploy/scheduler"))
	cfg := checkSchedulerDeployment(t, objs, 2, exampleProfiles)
	assertPreemption(t, "deploy/scheduler", cfg, false)
	preemptionObjs := decodeObjects(t, command(t, nil, kubectl, "kustomize", withPreemption))
	preemptionCfg := checkSchedulerDeployment(t, preemptionObjs, 2, exampleProfiles)
	assertPreemption(t, "deploy/scheduler with the preemption component", preemptionCfg, true)
	assertSameButPreemption(t, "the preemption component's ConfigMap", preemptionCfg, cfg)

	// Static pod: the pod and its config file, then its user's bindings.
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-f", "deploy/static-pod/gpusched.yaml")
	var pod v1.Pod
	findObject(t, decodeObjects(t, readRepoFile(t, "deploy", "static-pod", "gpusched.yaml")), "Pod", "gpusched", &pod)
	configPath := checkSchedulerArgs(t, pod.Spec.Containers[0].Args)
	if configPath != "/etc/kubernetes/gpusched-config.yaml" {
		t.Errorf("static pod --config=%s", configPath)
	}
	staticCfg := checkSchedulerConfig(t, "deploy/static-pod/gpusched-config.yaml", readRepoFile(t, "deploy", "static-pod", "gpusched-config.yaml"), exampleProfiles)
	if staticCfg.ClientConnection.Kubeconfig != "/etc/kubernetes/scheduler.conf" || !staticCfg.LeaderElection.LeaderElect {
		t.Errorf("static pod config: kubeconfig %q, leader election %v", staticCfg.ClientConnection.Kubeconfig, staticCfg.LeaderElection.LeaderElect)
	}
	// The kube-scheduler's identity may delete pods: the static pod preempts.
	assertPreemption(t, "deploy/static-pod/gpusched-config.yaml", staticCfg, true)
	extenderCfg := checkSchedulerConfig(t, "deploy/extender/scheduler-config.yaml", readRepoFile(t, "deploy", "extender", "scheduler-config.yaml"), extenderProfile)
	// The scheduler verifies the extender and presents its client certificate.
	if e := extenderCfg.Extenders; len(e) != 1 || !e[0].EnableHTTPS || e[0].TLSConfig == nil || e[0].TLSConfig.Insecure ||
		e[0].TLSConfig.CAFile == "" || e[0].TLSConfig.CertFile == "" || e[0].TLSConfig.KeyFile == "" || e[0].TLSConfig.ServerName == "" {
		t.Errorf("deploy/extender/scheduler-config.yaml: extenders %+v, want one over mutual TLS", e)
	}
	// Only the static pod's install trusts system:kube-scheduler, the stock
	// scheduler's identity too, to write assignments.
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-k", "deploy/static-pod/admission")
	for dir, want := range map[string]bool{"deploy/admission": false, "deploy/static-pod/admission": true} {
		var policy admissionv1.ValidatingAdmissionPolicy
		findObject(t, decodeObjects(t, command(t, nil, kubectl, "kustomize", dir)), "ValidatingAdmissionPolicy", "gpusched-assignment", &policy)
		writers := policy.Spec.Variables[0]
		if got := writers.Name == "writers" && strings.Contains(writers.Expression, "'system:kube-scheduler'"); got != want {
			t.Errorf("%s: system:kube-scheduler among the assignment's writers is %v, want %v (%s: %s)", dir, got, want, writers.Name, writers.Expression)
		}
	}
	covered["deploy/static-pod/admission/kustomization.yaml"] = true
	covered["deploy/static-pod/gpusched.yaml"] = true
	covered["deploy/static-pod/gpusched-config.yaml"] = true
	covered["deploy/static-pod/rbac.yaml"] = true
	covered["deploy/extender/scheduler-config.yaml"] = true // the stock scheduler's, with gpusched's extender
	covered[podGroupCRD] = true                             // installed by rbacCluster
	covered["deploy/simulate/merge.yaml"] = true            // applied by TestDeploySimulateJob
	// Applied by TestDeployAgentManifests, TestAdmissionPolicy and TestDeploySimulateJob.
	for _, dir := range []string{"deploy/agent", "deploy/admission", "deploy/simulate"} {
		for _, f := range kustomizationFiles(t, dir) {
			covered[f] = true
		}
	}
	assertEveryManifestCovered(t, covered)

	// gpusched's cluster roles: a kube-scheduler's, less deleting pods.
	var schedulerRole, gpuschedRole, preemptionRole rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", "gpusched-kube-scheduler", &schedulerRole)
	findObject(t, objs, "ClusterRole", "gpusched", &gpuschedRole)
	findObject(t, preemptionObjs, "ClusterRole", "gpusched-preemption", &preemptionRole)
	checkKubeSchedulerRole(t, c, "deploy/scheduler", slices.Concat(schedulerRole.Rules, gpuschedRole.Rules))
	checkPreemptionRole(t, "deploy/scheduler/preemption", preemptionRole.Rules)

	command(t, nil, kubectl, kc, "apply", "-f", "deploy/scheduler/serviceaccount.yaml",
		"-f", "deploy/scheduler/role.yaml", "-f", "deploy/scheduler/rbac.yaml", "-f", "deploy/static-pod/rbac.yaml")
	assertAccess(t, kubectl, kc, schedulerServiceAccount, schedulerNeeds, slices.Concat(preemptionNeeds, schedulerMustNot))
	assertAccess(t, kubectl, kc, schedulerServiceAccount, nil, []access{
		{"update", "leases.coordination.k8s.io/kube-controller-manager", "", "kube-system"},
		{"update", "leases.coordination.k8s.io/kube-scheduler", "", "kube-system"},
		{"create", "leases.coordination.k8s.io", "", "default"},
	})
	// The kube-scheduler's user has the API server's system:kube-scheduler
	// role, which deletes pods, and its system::leader-locking-kube-scheduler
	// Role: every Lease in kube-system.
	assertAccess(t, kubectl, kc, "system:kube-scheduler", slices.Concat(schedulerNeeds, preemptionNeeds), schedulerMustNot)

	command(t, nil, kubectl, kc, "apply", "-f", "deploy/scheduler/preemption/rbac.yaml")
	assertAccess(t, kubectl, kc, schedulerServiceAccount, slices.Concat(schedulerNeeds, preemptionNeeds), schedulerMustNot)

	// The dashboard reads nodes and pods; its kube-rbac-proxy sidecar reviews
	// tokens and access. Nothing in the cluster is written.
	command(t, nil, kubectl, kc, "apply", "-f", "deploy/dashboard/serviceaccount.yaml", "-f", "deploy/dashboard/rbac.yaml")
	assertAccess(t, kubectl, kc, "system:serviceaccount:kube-system:gpusched-dashboard", []access{
		{"get", "nodes", "", ""}, {"list", "nodes", "", ""}, {"watch", "nodes", "", ""},
		{"get", "pods", "", "default"}, {"list", "pods", "", ""}, {"watch", "pods", "", ""},
		{"list", "resourceslices.resource.k8s.io", "", ""}, {"watch", "resourceclaims.resource.k8s.io", "", ""},
		{"list", "deviceclasses.resource.k8s.io", "", ""},
		{"create", "tokenreviews.authentication.k8s.io", "", ""},
		{"create", "subjectaccessreviews.authorization.k8s.io", "", ""},
	}, slices.Concat(schedulerMustNot, []access{
		{"patch", "pods", "", "default"}, {"create", "pods", "binding", "default"}, {"patch", "nodes", "", ""},
		{"delete", "pods", "", "default"}, {"list", "podgroups.scheduling.x-k8s.io", "", ""},
		{"update", "resourceclaims.resource.k8s.io", "status", "default"},
		{"create", "events.events.k8s.io", "", "default"},
	}))

	// The defragmenter reads, evicts (never deletes) and updates Nodes,
	// which its admission policy limits to the reservations annotation.
	command(t, nil, kubectl, kc, "apply", "-f", "deploy/defragmenter/serviceaccount.yaml", "-f", "deploy/defragmenter/rbac.yaml")
	assertAccess(t, kubectl, kc, "system:serviceaccount:kube-system:gpusched-defragmenter", []access{
		{"list", "nodes", "", ""}, {"update", "nodes", "", ""}, {"watch", "pods", "", ""},
		{"create", "pods", "eviction", "default"}, {"list", "poddisruptionbudgets.policy", "", ""},
		{"create", "events", "", "default"}, {"update", "leases.coordination.k8s.io/gpusched-defragmenter", "", "kube-system"},
	}, []access{
		{"delete", "pods", "", "default"}, {"patch", "pods", "", "default"}, {"create", "pods", "binding", "default"},
		{"update", "nodes", "status", ""}, {"delete", "nodes", "", ""},
		{"update", "leases.coordination.k8s.io/kube-scheduler", "", "kube-system"},
	})
}

// preemptionOverlay writes a kustomization of deploy/scheduler/ with the
// deploy/scheduler/preemption component, as docs/install.md shows, and
// returns its directory.
func preemptionOverlay(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes relative paths only.
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot(), "deploy", "scheduler"))
	if err != nil {
		t.Fatal(err)
	}
	rel = filepath.ToSlash(rel)
	k := "resources:\n- " + rel + "\ncomponents:\n- " + rel + "/preemption\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// kustomizationFiles returns the files a kustomization or component in dir
// (relative to the repository) is made of: itself, its resources and its
// patches.
func kustomizationFiles(t *testing.T, dir string) []string {
	t.Helper()
	var k struct {
		Resources []string
		Patches   []struct{ Path string }
	}
	if err := yaml.Unmarshal(readRepoFile(t, dir, "kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	files := []string{dir + "/kustomization.yaml"}
	for _, r := range k.Resources {
		files = append(files, path.Join(dir, r))
	}
	for _, p := range k.Patches {
		if p.Path != "" {
			files = append(files, path.Join(dir, p.Path))
		}
	}
	return files
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
// the assignment annotation, hold its Lease, and authenticate requests to
// its secure port.
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
	{"update", "resourceclaims.resource.k8s.io", "status", "default"},
	{"create", "pods", "binding", "default"},
	{"patch", "pods", "status", "default"},
	{"patch", "pods", "", "default"},                                // the assignment annotation (PreBind)
	{"watch", "podgroups.scheduling.x-k8s.io", "", ""},              // GPUGang's gangs
	{"patch", "podgroups.scheduling.x-k8s.io", "status", "default"}, // and their status
	{"create", "events.events.k8s.io", "", "default"},
	{"patch", "events.events.k8s.io", "", "default"},
	{"create", "leases.coordination.k8s.io", "", "kube-system"},
	{"get", "leases.coordination.k8s.io/gpusched", "", "kube-system"},
	{"update", "leases.coordination.k8s.io/gpusched", "", "kube-system"},
	{"get", "configmaps/extension-apiserver-authentication", "", "kube-system"},
	{"create", "tokenreviews.authentication.k8s.io", "", ""},
	{"create", "subjectaccessreviews.authorization.k8s.io", "", ""},
}

// preemptionNeeds is what preemption adds: deleting its victims. gpusched's
// ServiceAccount has it only when preemption is turned on.
var preemptionNeeds = []access{
	{"delete", "pods", "", "default"},
	{"delete", "pods", "", "kube-system"},
}

// schedulerMustNot are things no scheduler needs, preemption or not.
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
	{"update", "podgroups.scheduling.x-k8s.io", "", "default"},
	{"delete", "podgroups.scheduling.x-k8s.io", "", "default"},
}

// kubeSchedulerOmitted are the rules of the API server's system:kube-scheduler
// role that gpusched's cluster roles leave out: deleting pods (preemption,
// granted on its own), the kube-scheduler's Lease and creating Leases
// anywhere (gpusched's Role has its own Lease), and LeaseCandidates
// (coordinated leader election, off by default).
var kubeSchedulerOmitted = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"kube-scheduler"}, Verbs: []string{"get", "update", "list", "watch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leasecandidates"}, Verbs: []string{"*"}},
}

// gpuschedExtra is what gpusched needs beyond a kube-scheduler's cluster
// role: patching the assignment annotation onto pods, reading PodGroups and
// writing their status (GPUGang).
var gpuschedExtra = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
	{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups/status"}, Verbs: []string{"patch", "update"}},
}

// checkKubeSchedulerRole compares rules, gpusched's cluster-wide rules
// (without preemption), with the system:kube-scheduler role of the running
// API server: they must grant everything it does except kubeSchedulerOmitted,
// and nothing beyond it except gpuschedExtra.
func checkKubeSchedulerRole(t *testing.T, c *testcluster.Cluster, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ks, err := c.Client.RbacV1().ClusterRoles().Get(context.Background(), "system:kube-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, missing := rbacvalidation.Covers(slices.Concat(rules, kubeSchedulerOmitted), ks.Rules); !ok {
		t.Errorf("%s: gpusched's cluster roles lack what system:kube-scheduler grants: %v", what, missing)
	}
	if ok, extra := rbacvalidation.Covers(slices.Concat(ks.Rules, gpuschedExtra), rules); !ok {
		t.Errorf("%s: gpusched's cluster roles grant more than system:kube-scheduler, the annotation patch and PodGroups: %v", what, extra)
	}
	if ok, _ := rbacvalidation.Covers(rules, kubeSchedulerOmitted[:1]); ok {
		t.Errorf("%s: gpusched's cluster roles delete pods without preemption turned on", what)
	}
}

// checkPreemptionRole checks that the role preemption adds grants deleting
// pods and nothing else.
func checkPreemptionRole(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	deletePods := kubeSchedulerOmitted[:1]
	if ok, extra := rbacvalidation.Covers(deletePods, rules); !ok {
		t.Errorf("%s: the preemption role grants more than deleting pods: %v", what, extra)
	}
	if ok, _ := rbacvalidation.Covers(rules, deletePods); !ok {
		t.Errorf("%s: the preemption role does not grant deleting pods", what)
	}
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
