package e2e

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// chartAgentServiceAccount is the identity the chart gives the agent in a
// release named gpusched in kube-system.
const chartAgentServiceAccount = "system:serviceaccount:kube-system:gpusched-agent"

// TestHelmChartAgentAdmission renders charts/gpusched with agent.enabled and
// admissionPolicy.enabled, lints it, applies the rendering with `kubectl
// apply --dry-run=server`, checks the DaemonSet and the agent's role, applies
// the RBAC and the policies for real and checks what the chart's identities
// may do (the same checks as for deploy/: checkAdmission), then relaxes
// admissionPolicy.agentNodeNameRequired and sees the agent allowed without a
// node name. It renders the other agent settings (CDI, MPS, NVML from a host
// path) and checks that bad values are refused naming the field.
func TestHelmChartAgentAdmission(t *testing.T) {
	helm := findTool(t, "helm", "HELM", helmInstall)
	enabled := []string{"--set=agent.enabled=true", "--set=admissionPolicy.enabled=true"}
	command(t, nil, helm, slices.Concat([]string{"lint", "--strict", "charts/gpusched"}, enabled)...)
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath

	rendered := command(t, nil, helm, slices.Concat([]string{"template", "gpusched", "charts/gpusched", "--namespace=kube-system"}, enabled)...)
	command(t, rendered, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs := decodeObjects(t, rendered)
	ds := checkAgentDaemonSet(t, "agent.enabled=true", objs, "gpusched-agent")
	if ds.Spec.Template.Spec.RuntimeClassName == nil || *ds.Spec.Template.Spec.RuntimeClassName != "nvidia" {
		t.Errorf("agent.enabled=true: runtimeClassName %v, want nvidia", ds.Spec.Template.Spec.RuntimeClassName)
	}
	var role rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", "gpusched-agent", &role)
	checkAgentRole(t, "agent.enabled=true", role.Rules)

	command(t, rbacOnly(t, objs), kubectl, kc, "apply", "-f", "-")
	command(t, nil, kubectl, kc, "apply", "-f", "deploy/extender/serviceaccount.yaml", "-f", "deploy/extender/rbac.yaml")
	assertAccess(t, kubectl, kc, chartAgentServiceAccount, agentNeeds, agentMustNot)
	command(t, admissionOnly(t, objs), kubectl, kc, "apply", "-f", "-")
	checkAdmission(t, c, writers{schedulerServiceAccount, extenderServiceAccount, chartAgentServiceAccount})
	// The chart's share-quota policy is deploy/admission's, rule for rule.
	var chartQuota, deployQuota admissionv1.ValidatingAdmissionPolicy
	findObject(t, objs, "ValidatingAdmissionPolicy", "gpusched-share-quota", &chartQuota)
	findObject(t, decodeObjects(t, readRepoFile(t, "deploy", "admission", "share-quota.yaml")), "ValidatingAdmissionPolicy", "gpusched-share-quota", &deployQuota)
	if !reflect.DeepEqual(chartQuota.Spec, deployQuota.Spec) {
		t.Errorf("the chart's share-quota policy differs from deploy/admission/share-quota.yaml's:\nchart  %+v\ndeploy %+v", chartQuota.Spec, deployQuota.Spec)
	}
	checkUnrestricted(t, c, chartAgentServiceAccount, "gpusched-agent-unrestricted")

	// agentNodeNameRequired=false: a request of the agent without a node
	// name may write the inventory; with another node's name it still may not.
	relaxed := command(t, nil, helm, slices.Concat([]string{"template", "gpusched", "charts/gpusched", "--namespace=kube-system",
		"--set=admissionPolicy.agentNodeNameRequired=false"}, enabled)...)
	command(t, admissionOnly(t, decodeObjects(t, relaxed)), kubectl, kc, "apply", "-f", "-")
	devices := `[{"index":0,"uuid":"GPU-1","model":"NVIDIA-A100-SXM4-80GB","memoryMiB":81920}]`
	ctx := context.Background()
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = patchAnnotation(ctx, impersonate(t, c, chartAgentServiceAccount, "").CoreV1().Nodes(), "gpu-1", gpu.AnnotationDevices, &devices); err == nil {
			break
		}
	}
	assertAllowed(t, "agentNodeNameRequired=false: the agent without a node name writing an inventory", err)
	_, err = patchAnnotation(ctx, impersonate(t, c, chartAgentServiceAccount, "gpu-0").CoreV1().Nodes(), "gpu-1", gpu.AnnotationDevices, ptr.To(""))
	assertRefused(t, "agentNodeNameRequired=false: the agent of another node writing the inventory", err, "this agent runs on node gpu-0")

	// CDI, MPS and the NVIDIA runtime as the default, in the release's own
	// namespace.
	command(t, nil, kubectl, kc, "create", "namespace", "gpu-system")
	custom := command(t, nil, helm, "template", "team", "charts/gpusched", "--namespace=gpu-system", "--set=agent.enabled=true", "--set=admissionPolicy.enabled=true",
		"--set=agent.mode=cdi", "--set=agent.mpsPipeDir=/run/nvidia/mps", "--set=agent.unrestrictedServiceAccounts={gpu-operator/nvidia-dcgm-exporter}",
		"--set=agent.nvml.runtimeClassName=", "--set=agent.image.tag=v9")
	command(t, custom, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	ds = checkAgentDaemonSet(t, "custom agent values", decodeObjects(t, custom), "team-gpusched-agent")
	assertCustomAgent(t, ds.Spec.Template.Spec)

	for _, bad := range []struct{ set, want string }{
		{"agent.mode=gpu", "/agent/mode"},
		{"agent.metricsPort=0", "/agent/metricsPort"},
		{"agent.interval=soon", "/agent/interval"},
		{"agent.nriSocketDir=var/run/nri", "/agent/nriSocketDir"},
		{"agent.mpsPipeDir=mps", "/agent/mpsPipeDir"},
		{"agent.nvml.runtimeClassName=NVIDIA", "/agent/nvml/runtimeClassName"},
		{"agent.unrestrictedServiceAccounts={gpu-operator}", "/agent/unrestrictedServiceAccounts/0"},
		{"agent.enabled=yes", "/agent/enabled"},
		{"agent.enabled=true,admissionPolicy.enabled=true,agent.serviceAccount.create=false", "agent.serviceAccount.name is required"},
		// The agent is never installed without the policies that keep pods
		// from writing their own assignments, in Deny mode.
		{"agent.enabled=true", "agent.enabled=true needs admissionPolicy.enabled=true"},
		{"agent.enabled=true,admissionPolicy.enabled=true,admissionPolicy.validationActions={Warn}", "needs admissionPolicy.validationActions to include Deny, not [Warn]"},
		{"agent.enabled=true,admissionPolicy.enabled=true,admissionPolicy.validationActions={Audit}", "needs admissionPolicy.validationActions to include Deny, not [Audit]"},
		{"admissionPolicy.enabled=yes", "/admissionPolicy/enabled"},
		{"admissionPolicy.validationActions={Block}", "/admissionPolicy/validationActions/0"},
		{"admissionPolicy.assignmentWriters={it's}", "/admissionPolicy/assignmentWriters/0"},
		{"admissionPolicy.agentUser=a b", "/admissionPolicy/agentUser"},
		{"admissionPolicy.enabled=true,admissionPolicy.validationActions={Deny,Warn}", "admissionPolicy.validationActions: Deny and Warn cannot be combined"},
	} {
		_, err := tryCommand(nil, helm, "template", "gpusched", "charts/gpusched", "--set", bad.set)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: error %v, want one naming %s", bad.set, err, bad.want)
		}
	}
}

// assertCustomAgent checks the rendering of the custom agent values: CDI
// mode, the MPS pipe directory (read-only), no runtime class, the image tag,
// and the release's namespace added to the namespaces given.
func assertCustomAgent(t *testing.T, pod v1.PodSpec) {
	t.Helper()
	c := pod.Containers[0]
	for _, arg := range []string{"--mode=cdi", "--mps-pipe-dir=/run/nvidia/mps"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("custom agent values: %s not among the arguments %v", arg, c.Args)
		}
	}
	if c.Image != "registry.example/gpusched-agent:v9" {
		t.Errorf("custom agent values: image %s", c.Image)
	}
	if pod.RuntimeClassName != nil {
		t.Errorf("custom agent values: runtimeClassName %s, want none", *pod.RuntimeClassName)
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm v1.VolumeMount) bool {
		return vm.MountPath == "/run/nvidia/mps" && vm.ReadOnly && hostPaths[vm.Name] == "/run/nvidia/mps"
	}) {
		t.Errorf("custom agent values: the MPS pipe directory is not mounted read-only: %+v", c.VolumeMounts)
	}
}

// admissionOnly renders the admission policies and their bindings among
// objs as a YAML stream.
func admissionOnly(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	return kindsOnly(t, objs, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
}
