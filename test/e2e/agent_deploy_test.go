package e2e

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
)

// agentNeeds is what the node agent does through the API: read its Node and
// patch its inventory annotation.
var agentNeeds = []access{
	{"get", "nodes", "", ""},
	{"patch", "nodes", "", ""},
}

// agentMustNot is everything else a compromised agent on one node could use
// against the cluster: other verbs on Nodes, pods (it reads assignments from
// NRI, not the API), Secrets, writes of any kind.
var agentMustNot = []access{
	{"list", "nodes", "", ""},
	{"watch", "nodes", "", ""},
	{"update", "nodes", "", ""},
	{"delete", "nodes", "", ""},
	{"patch", "nodes", "status", ""},
	{"get", "pods", "", "default"},
	{"list", "pods", "", ""},
	{"patch", "pods", "", "default"},
	{"create", "pods", "binding", "default"},
	{"get", "secrets", "", "kube-system"},
	{"create", "events", "", "default"},
	{"create", "serviceaccounts", "token", "kube-system"},
}

// agentRules is the agent's whole ClusterRole.
var agentRules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}

// TestDeployAgentManifests applies deploy/agent/ (its namespace for real,
// the rest with `kubectl apply --dry-run=server`) and deploy/admission/ (in
// dry run; TestAdmissionPolicy applies it for real) to a real API server,
// checks the DaemonSet (checkAgentDaemonSet) and the role, then applies the
// RBAC for real and asks the API server what the agent's ServiceAccount may
// and may not do.
func TestDeployAgentManifests(t *testing.T) {
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath
	// A server-side dry run creates nothing, so the namespace first.
	command(t, nil, kubectl, kc, "apply", "-f", "deploy/agent/namespace.yaml")
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-k", "deploy/agent")
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "-k", "deploy/admission")

	objs := decodeObjects(t, command(t, nil, kubectl, "kustomize", "deploy/agent"))
	checkAgentDaemonSet(t, "deploy/agent", objs, "gpusched-agent")
	var role rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", "gpusched-agent", &role)
	checkAgentRole(t, "deploy/agent", role.Rules)

	command(t, nil, kubectl, kc, "apply", "-f", "deploy/agent/serviceaccount.yaml", "-f", "deploy/agent/rbac.yaml")
	assertAccess(t, kubectl, kc, agentServiceAccount, agentNeeds, agentMustNot)
}

// checkAgentRole checks that rules grant exactly agentRules.
func checkAgentRole(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	if ok, extra := rbacvalidation.Covers(agentRules, rules); !ok {
		t.Errorf("%s: the agent's role grants more than get and patch on nodes: %v", what, extra)
	}
	if ok, missing := rbacvalidation.Covers(rules, agentRules); !ok {
		t.Errorf("%s: the agent's role lacks %v", what, missing)
	}
}

// checkAgentDaemonSet checks what the agent needs on every node: its
// ServiceAccount, its node's name from spec.nodeName, the NRI socket and
// device-plugin directories from the host, NVML from the NVIDIA runtime,
// GPU nodes only (and their taint tolerated), probes on the metrics port,
// resource requests, a read-only root filesystem, its own pods unrestricted
// by annotation (not by namespace), and a rollout that never runs two
// agents on one node.
func checkAgentDaemonSet(t *testing.T, what string, objs []*unstructured.Unstructured, serviceAccount string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	findObject(t, objs, "DaemonSet", "", &ds)
	pod := ds.Spec.Template.Spec
	if pod.ServiceAccountName != serviceAccount {
		t.Errorf("%s: ServiceAccount %q, want %q", what, pod.ServiceAccountName, serviceAccount)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("%s: nodeSelector %v does not select GPU nodes", what, pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl v1.Toleration) bool { return tl.Key == "nvidia.com/gpu" }) {
		t.Errorf("%s: the nvidia.com/gpu taint is not tolerated: %v", what, pod.Tolerations)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]v1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("%s: NODE_NAME is not spec.nodeName: %+v", what, e)
	}
	hostDirs := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostDirs[v.Name] = v.HostPath.Path
		}
	}
	for _, want := range []struct{ hostPath, mountPath string }{
		{"/var/run/nri", "/var/run/nri"},
		{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins"},
	} {
		if !slices.ContainsFunc(c.VolumeMounts, func(m v1.VolumeMount) bool {
			return m.MountPath == want.mountPath && hostDirs[m.Name] == want.hostPath
		}) {
			t.Errorf("%s: host directory %s is not mounted at %s", what, want.hostPath, want.mountPath)
		}
	}
	if env["NVIDIA_VISIBLE_DEVICES"].Value != "all" || !strings.Contains(env["NVIDIA_DRIVER_CAPABILITIES"].Value, "utility") {
		t.Errorf("%s: the NVIDIA runtime is not asked for NVML (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility): %v", what, c.Env)
	}
	for probe, path := range map[*v1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || containerPort(c, probe.HTTPGet.Port.String()) == 0 {
			t.Errorf("%s: want a probe of %s on the metrics port, got %+v", what, path, probe)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: want CPU and memory requests and a memory limit: %+v", what, c.Resources)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root filesystem is writable", what)
	}
	if got := ds.Spec.Template.Annotations[agentnri.AnnotationUnrestricted]; got != "true" {
		t.Errorf("%s: the agent's pods are not annotated %s: \"true\" (%q): a new agent pod would lose NVML while the old one handles NRI",
			what, agentnri.AnnotationUnrestricted, got)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--unrestricted-namespaces") }) {
		t.Errorf("%s: the agent is given --unrestricted-namespaces, which it refuses: %v", what, c.Args)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxSurge != nil && ru.MaxSurge.IntValue() != 0 {
		t.Errorf("%s: the rollout surges (maxSurge %v): two agents on one node would both adjust every container, which NRI refuses", what, ru.MaxSurge)
	}
	return &ds
}
