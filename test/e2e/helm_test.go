package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	gpuconfig "github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/policyservice"
)

// helmInstall is how .ci/run installs helm (see also `make tools`).
const helmInstall = "GOBIN=$PWD/bin go install helm.sh/helm/v3/cmd/helm@v3.22.0"

// TestHelmChart lints charts/gpusched, renders it with its defaults, with
// preemption.enabled and with every value changed, applies the renderings
// with `kubectl apply --dry-run=server`, checks the Deployment and the
// scheduler configuration they carry, applies the RBAC for real (without,
// then with preemption) and asks the API server what the chart's
// ServiceAccount may do, and checks that bad values are refused with a
// message naming the value.
func TestHelmChart(t *testing.T) {
	helm := findTool(t, "helm", "HELM", helmInstall)
	command(t, nil, helm, "lint", "--strict", "charts/gpusched")
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath

	defaults := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system")
	command(t, defaults, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs := decodeObjects(t, defaults)
	defaultCfg := checkSchedulerDeployment(t, objs, 2, exampleProfiles)
	assertPreemption(t, "chart defaults", defaultCfg, false)
	var role rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", "gpusched", &role)
	checkKubeSchedulerRole(t, c, "chart defaults", role.Rules)
	if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetName() == "gpusched-preemption" }) {
		t.Error("chart defaults: the preemption role is rendered")
	}
	command(t, rbacOnly(t, objs), kubectl, kc, "apply", "-f", "-")
	assertAccess(t, kubectl, kc, schedulerServiceAccount, schedulerNeeds, slices.Concat(preemptionNeeds, schedulerMustNot))
	assertAccess(t, kubectl, kc, schedulerServiceAccount, nil, []access{
		{"update", "leases.coordination.k8s.io/kube-scheduler", "", "kube-system"},
		{"create", "leases.coordination.k8s.io", "", "default"},
	})

	// preemption.enabled: the same release with GPUPreemption and the
	// permission to delete pods.
	preemption := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system", "--set=preemption.enabled=true")
	command(t, preemption, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs = decodeObjects(t, preemption)
	preemptionCfg := checkSchedulerDeployment(t, objs, 2, exampleProfiles)
	assertPreemption(t, "preemption.enabled=true", preemptionCfg, true)
	assertSameButPreemption(t, "preemption.enabled=true", preemptionCfg, defaultCfg)
	var preemptionRole rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", "gpusched-preemption", &preemptionRole)
	checkPreemptionRole(t, "preemption.enabled=true", preemptionRole.Rules)
	command(t, rbacOnly(t, objs), kubectl, kc, "apply", "-f", "-")
	assertAccess(t, kubectl, kc, schedulerServiceAccount, slices.Concat(schedulerNeeds, preemptionNeeds), schedulerMustNot)

	// gang.topologyKey: the profile of examples/gpusched-gang-config.yaml
	// (gangs are on by default).
	gang := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system",
		"--set=gang.topologyKey=topology.kubernetes.io/rack")
	command(t, gang, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	checkSchedulerDeployment(t, decodeObjects(t, gang), 2, gangProfiles)

	// telemetry.enabled: GPUTelemetry scores beside GPUPlacement with the
	// args given, and the Secret named is mounted for its credential files.
	telemetry := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system",
		"--set=telemetry.enabled=true", "--set=telemetry.args.prometheus.address=http://127.0.0.1:9090",
		"--set=telemetry.args.prometheus.bearerTokenFile=/etc/gpusched/telemetry/token", "--set=telemetry.secretName=prometheus-token")
	command(t, telemetry, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs = decodeObjects(t, telemetry)
	telemetryCfg := checkSchedulerDeployment(t, objs, 2, gpuPlacementProfile)
	assertTelemetry(t, telemetryCfg, objs)

	// plugin.model: the shipped model ranks the nodes, read from the
	// ConfigMap mounted beside the configuration, and PairFit chooses the
	// GPUs.
	modelFile := filepath.Join("python", "examples", "learned_model.json")
	learned := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system", "--set-file=plugin.model="+modelFile)
	command(t, learned, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs = decodeObjects(t, learned)
	assertModel(t, checkSchedulerDeployment(t, objs, 2, gpuPlacementProfile), objs, modelFile)

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(customValues), 0o600); err != nil {
		t.Fatal(err)
	}
	command(t, nil, kubectl, kc, "create", "namespace", "gpu-system")
	custom := command(t, nil, helm, "template", "team", "charts/gpusched", "--namespace=gpu-system", "--values="+values)
	command(t, custom, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs = decodeObjects(t, custom)
	cfg := checkSchedulerDeployment(t, objs, 3, gpuPlacementProfile)
	if le := cfg.LeaderElection; le.ResourceName != "team-lease" || le.ResourceNamespace != "gpu-system" {
		t.Errorf("Lease %s/%s, want gpu-system/team-lease", le.ResourceNamespace, le.ResourceName)
	}
	p := cfg.Profiles[0]
	if p.SchedulerName != "team-gpus" {
		t.Errorf("schedulerName %q", p.SchedulerName)
	}
	if slices.ContainsFunc(p.Plugins.Bind.Enabled, func(pl kubeschedulerconfig.Plugin) bool { return pl.Name == "GPUPlacement" }) {
		t.Error("GPUPlacement binds with plugin.bind=false")
	}
	assertPreemption(t, "custom values", cfg, true)
	for _, pc := range p.PluginConfig {
		if args, ok := pc.Args.(*gpuconfig.GPUPlacementArgs); ok {
			s := args.ScoringStrategy
			if s.Type != gpu.PolicySpread || len(s.Resources) != 2 || s.Resources[0].Weight != 3 || s.Resources[1].Name != gpuconfig.ResourceGPUMemory {
				t.Errorf("GPUPlacement args %+v", s)
			}
		}
	}
	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "team-gpusched", &d)
	ctr := d.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/gpusched:v9" || !slices.Contains(ctr.Args, "--v=4") || ctr.Resources.Requests.Cpu().String() != "250m" {
		t.Errorf("container %s %v %v", ctr.Image, ctr.Args, ctr.Resources.Requests)
	}

	for _, bad := range []struct{ set, want string }{
		{"plugin.weight=0", "/plugin/weight"},
		{"plugin.scoringStrategy.resources[0].weight=101", "/plugin/scoringStrategy/resources/0/weight"},
		{"plugin.scoringStrategy.resources[0].name=nvidia.com/mig", "/plugin/scoringStrategy/resources/0/name"},
		{"plugin.scoringStrategy.type=Best Fit", "/plugin/scoringStrategy/type"},
		{"replicas=0", "/replicas"},
		{"preemption.enabled=yes", "/preemption/enabled"},
		{"gang.scheduleTimeoutSeconds=0", "/gang/scheduleTimeoutSeconds"},
		{"gang.backoffSeconds=601", "/gang/backoffSeconds"},
		{"telemetry.enabled=true", "telemetry.enabled=true needs telemetry.args.prometheus.address"},
		{"telemetry.weight=0", "/telemetry/weight"},
		{"telemetry.secretName=Bad_Name", "/telemetry/secretName"},
		{"schedulerName=GPU_Sched", "/schedulerName"},
		{"leaderElection.enabled=false", "leaderElection.enabled=false with replicas=2"},
		{"plugin.model=x,plugin.scoringStrategy.type=External", "plugin.model with plugin.scoringStrategy.type=External"},
	} {
		_, err := tryCommand(nil, helm, "template", "gpusched", "charts/gpusched", "--set", bad.set)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: error %v, want one naming %s", bad.set, err, bad.want)
		}
	}
}

// customValues changes every value the chart documents that shapes the
// scheduler.
const customValues = `
schedulerName: team-gpus
replicas: 3
image:
  tag: v9
plugin:
  weight: 7
  bind: false
  scoringStrategy:
    type: Spread
    resources:
    - name: nvidia.com/gpu
      weight: 3
    - name: gpusched.io/gpu-memory
      weight: 1
preemption:
  enabled: true
leaderElection:
  resourceName: team-lease
logVerbosity: 4
resources:
  requests:
    cpu: 250m
    memory: 512Mi
`

// rbacOnly renders the ServiceAccount and RBAC objects among objs as a YAML
// stream.
func rbacOnly(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	return kindsOnly(t, objs, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
}

// kindsOnly renders the objects of the kinds among objs as a YAML stream.
func kindsOnly(t *testing.T, objs []*unstructured.Unstructured, kinds ...string) []byte {
	t.Helper()
	var out []byte
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			raw, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			out = append(append(out, "---\n"...), raw...)
		}
	}
	return out
}

// assertTelemetry checks the chart's telemetry.enabled rendering: GPUTelemetry
// among the profile's plugins with its weight, its args as set, and the
// credentials Secret mounted where the args read it.
func assertTelemetry(t *testing.T, cfg *kubeschedulerconfig.KubeSchedulerConfiguration, objs []*unstructured.Unstructured) {
	t.Helper()
	p := cfg.Profiles[0]
	if !slices.ContainsFunc(p.Plugins.MultiPoint.Enabled, func(pl kubeschedulerconfig.Plugin) bool { return pl.Name == "GPUTelemetry" && pl.Weight == 2 }) {
		t.Errorf("telemetry.enabled=true: GPUTelemetry is not among the multiPoint plugins with weight 2: %+v", p.Plugins.MultiPoint.Enabled)
	}
	var args *gpuconfig.GPUTelemetryArgs
	for _, pc := range p.PluginConfig {
		if a, ok := pc.Args.(*gpuconfig.GPUTelemetryArgs); ok {
			args = a
		}
	}
	if args == nil || args.Prometheus.Address != "http://127.0.0.1:9090" || args.Prometheus.BearerTokenFile != "/etc/gpusched/telemetry/token" {
		t.Errorf("telemetry.enabled=true: GPUTelemetry args %+v", args)
	}
	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "gpusched", &d)
	spec := d.Spec.Template.Spec
	mounted := slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m v1.VolumeMount) bool {
		return m.Name == "telemetry" && m.MountPath == "/etc/gpusched/telemetry" && m.ReadOnly
	})
	fromSecret := slices.ContainsFunc(spec.Volumes, func(v v1.Volume) bool {
		return v.Name == "telemetry" && v.Secret != nil && v.Secret.SecretName == "prometheus-token"
	})
	if !mounted || !fromSecret {
		t.Errorf("telemetry.secretName: mounted %v, from the Secret %v: %+v %+v", mounted, fromSecret, spec.Containers[0].VolumeMounts, spec.Volumes)
	}
}

// assertModel checks a release with plugin.model: GPUPlacement scores with
// the External strategy from a model at /etc/gpusched/model.json, PairFit
// its fallback, and the ConfigMap mounted there holds the model file as
// given, which the scheduler's model parser accepts.
func assertModel(t *testing.T, cfg *kubeschedulerconfig.KubeSchedulerConfiguration, objs []*unstructured.Unstructured, modelFile string) {
	t.Helper()
	var args *gpuconfig.GPUPlacementArgs
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if a, ok := pc.Args.(*gpuconfig.GPUPlacementArgs); ok {
			args = a
		}
	}
	if args == nil || args.ScoringStrategy.Type != gpuconfig.ScoringStrategyExternal || args.External.Model != "/etc/gpusched/model.json" ||
		args.External.Endpoint != "" || args.External.Fallback != gpu.DefaultPolicy {
		t.Fatalf("plugin.model: GPUPlacement args %+v", args)
	}
	var cm v1.ConfigMap
	findObject(t, objs, "ConfigMap", "gpusched", &cm)
	want := readRepoFile(t, modelFile)
	if got := cm.Data["model.json"]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("plugin.model: the ConfigMap's model.json is not the file given (%d bytes, want %d)", len(got), len(want))
	}
	if _, err := policyservice.ParseModel([]byte(cm.Data["model.json"])); err != nil {
		t.Errorf("plugin.model: the mounted model: %v", err)
	}
}
