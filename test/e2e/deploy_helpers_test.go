package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulervalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	schedulernames "k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"sigs.k8s.io/yaml"

	gpuconfig "github.com/gpusched/gpusched/pkg/apis/config"
	gpuvalidation "github.com/gpusched/gpusched/pkg/apis/config/validation"
	"github.com/gpusched/gpusched/pkg/plugins/gpupreemption"
)

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// findTool returns the path of an external command the deployment tests
// drive: $envVar when set, else bin/<name> in the repository, else <name> on
// PATH. When it is missing the test fails if the CI environment variable is
// set (CI runs every test; .ci/run installs the tools) and is skipped
// otherwise, saying how to install it.
func findTool(t *testing.T, name, envVar, install string) string {
	t.Helper()
	if envVar != "" {
		if p := os.Getenv(envVar); p != "" {
			return p
		}
	}
	if p := filepath.Join(repoRoot(), "bin", name); isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := name + " not found (looked at $" + envVar + ", bin/" + name + " and PATH); install it with: " + install
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// command runs an external tool and returns its standard output; it fails
// the test on a non-zero exit, with the tool's standard error.
func command(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, err := tryCommand(stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
	return out
}

// tryCommand runs an external tool; a non-zero exit is an error carrying its
// standard error.
func tryCommand(stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot()
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), errors.New(strings.TrimSpace(err.Error() + ": " + stderr.String()))
	}
	return stdout.Bytes(), nil
}

// decodeObjects splits a multi-document YAML stream into objects, skipping
// empty documents.
func decodeObjects(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decoding manifests: %v", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// findObject returns the only object of the kind, converted into out.
func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == kind && (name == "" || o.GetName() == name)
	})
	if i < 0 {
		t.Fatalf("no %s %q among the manifests", kind, name)
	}
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, objs[i].GetName(), err)
	}
}

// checkSchedulerArgs parses a container's arguments with the kube-scheduler
// command's own flags and returns the --config file's path.
func checkSchedulerArgs(t *testing.T, args []string) string {
	t.Helper()
	opts := options.NewOptions()
	fs := pflag.NewFlagSet("gpusched", pflag.ContinueOnError)
	for _, set := range opts.Flags.FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("scheduler arguments %q: %v", args, err)
	}
	if opts.ConfigFile == "" {
		t.Fatalf("scheduler arguments %q: no --config", args)
	}
	return opts.ConfigFile
}

// strictCodecs decode a KubeSchedulerConfiguration as the scheduler does, and
// also reject unknown fields.
var strictCodecs = serializer.NewCodecFactory(kubeschedulerscheme.Scheme, serializer.EnableStrict)

// profileCheck says what checkSchedulerConfig expects of a configuration's
// profiles.
type profileCheck int

const (
	// exampleProfiles: the profiles of examples/gpusched-config.yaml, but
	// for their postFilter plugins, which say whether preemption runs
	// (assertPreemption checks that).
	exampleProfiles profileCheck = iota
	// gpuPlacementProfile: a profile with GPUPlacement args, whatever else.
	gpuPlacementProfile
	// extenderProfile: no GPUPlacement (the stock scheduler with gpusched's
	// extender).
	extenderProfile
	// gangProfiles: the profiles of examples/gpusched-gang-config.yaml, but
	// for their postFilter plugins.
	gangProfiles
)

// checkSchedulerConfig decodes a KubeSchedulerConfiguration strictly with
// gpusched's plugin args registered, validates it as the kube-scheduler
// does and any GPUPlacement args as the plugin does, checks its profiles as
// profiles says, and returns it.
func checkSchedulerConfig(t *testing.T, what string, raw []byte, profiles profileCheck) *kubeschedulerconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := strictCodecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	cfg, ok := obj.(*kubeschedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("%s: a %T, not a KubeSchedulerConfiguration", what, obj)
	}
	if err := kubeschedulervalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	found := false
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if args, ok := pc.Args.(*gpuconfig.GPUPlacementArgs); ok {
				found = true
				if errs := gpuvalidation.ValidateGPUPlacementArgs(field.NewPath("args"), args); len(errs) > 0 {
					t.Errorf("%s: profile %s: %v", what, p.SchedulerName, errs.ToAggregate())
				}
			}
			if args, ok := pc.Args.(*gpuconfig.GPUGangArgs); ok {
				if errs := gpuvalidation.ValidateGPUGangArgs(field.NewPath("args"), args); len(errs) > 0 {
					t.Errorf("%s: profile %s: %v", what, p.SchedulerName, errs.ToAggregate())
				}
			}
			if args, ok := pc.Args.(*gpuconfig.GPUTelemetryArgs); ok {
				if errs := gpuvalidation.ValidateGPUTelemetryArgs(field.NewPath("args"), args); len(errs) > 0 {
					t.Errorf("%s: profile %s: %v", what, p.SchedulerName, errs.ToAggregate())
				}
			}
		}
	}
	if found != (profiles != extenderProfile) {
		t.Errorf("%s: GPUPlacement args in a profile: %v", what, found)
	}
	example := map[profileCheck]string{exampleProfiles: "gpusched-config.yaml", gangProfiles: "gpusched-gang-config.yaml"}[profiles]
	if example != "" {
		want, got := profilesOf(t, readRepoFile(t, "examples", example)), profilesOf(t, raw)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: profiles differ from examples/%s:\n%v\nwant\n%v", what, example, got, want)
		}
	}
	return cfg
}

// profilesOf returns a configuration's profiles as YAML data, without
// their postFilter plugins.
func profilesOf(t *testing.T, raw []byte) any {
	t.Helper()
	var doc struct{ Profiles []map[string]any }
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Profiles {
		if plugins, ok := p["plugins"].(map[string]any); ok {
			delete(plugins, "postFilter")
		}
	}
	return doc.Profiles
}

// runsAtPostFilter says whether the plugin name runs at PostFilter in a
// decoded (defaulted) profile, as the scheduler's framework expands its
// plugins: enabled at postFilter, or among the multiPoint plugins (the
// defaults included) and not disabled at postFilter.
func runsAtPostFilter(p kubeschedulerconfig.KubeSchedulerProfile, name string) bool {
	has := func(plugins []kubeschedulerconfig.Plugin, names ...string) bool {
		return slices.ContainsFunc(plugins, func(pl kubeschedulerconfig.Plugin) bool { return slices.Contains(names, pl.Name) })
	}
	if p.Plugins == nil {
		return false
	}
	if has(p.Plugins.PostFilter.Enabled, name) {
		return true
	}
	return !has(p.Plugins.PostFilter.Disabled, name, "*") && has(p.Plugins.MultiPoint.Enabled, name)
}

// assertPreemption checks that preemption runs, or not, in every profile of
// cfg, and that where it runs it is GPUPreemption: DefaultPreemption never
// runs in a gpusched profile, alone (it would choose victims blind to GPUs)
// or beside GPUPreemption (two preemptions for one pod).
func assertPreemption(t *testing.T, what string, cfg *kubeschedulerconfig.KubeSchedulerConfiguration, want bool) {
	t.Helper()
	for _, p := range cfg.Profiles {
		if runsAtPostFilter(p, schedulernames.DefaultPreemption) {
			t.Errorf("%s: profile %s: DefaultPreemption runs; gpusched profiles preempt with %s", what, p.SchedulerName, gpupreemption.Name)
		}
		if got := runsAtPostFilter(p, gpupreemption.Name); got != want {
			t.Errorf("%s: profile %s: %s enabled %v, want %v", what, p.SchedulerName, gpupreemption.Name, got, want)
		}
	}
}

// assertSameButPreemption checks that got and want differ in nothing but
// their profiles' postFilter plugins.
func assertSameButPreemption(t *testing.T, what string, got, want *kubeschedulerconfig.KubeSchedulerConfiguration) {
	t.Helper()
	strip := func(cfg *kubeschedulerconfig.KubeSchedulerConfiguration) kubeschedulerconfig.KubeSchedulerConfiguration {
		c := *cfg
		c.Profiles = slices.Clone(cfg.Profiles)
		for i := range c.Profiles {
			if c.Profiles[i].Plugins != nil {
				plugins := *c.Profiles[i].Plugins
				plugins.PostFilter = kubeschedulerconfig.PluginSet{}
				c.Profiles[i].Plugins = &plugins
			}
		}
		return c
	}
	if g, w := strip(got), strip(want); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: differs from the configuration without preemption in more than postFilter:\n%+v\nwant\n%+v", what, g, w)
	}
}

// checkSchedulerDeployment checks what every gpusched Deployment must have:
// the replicas, leader election, the scheduler's health endpoints on the
// secure port over HTTPS, resource requests, a non-root user and a read-only
// root filesystem, and a configuration (from the ConfigMap it mounts) that
// the scheduler accepts. It returns the configuration.
func checkSchedulerDeployment(t *testing.T, objs []*unstructured.Unstructured, replicas int32, profiles profileCheck) *kubeschedulerconfig.KubeSchedulerConfiguration {
	t.Helper()
	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("Deployment replicas %v, want %d", d.Spec.Replicas, replicas)
	}
	pod := d.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the container's root filesystem is writable or it may escalate privileges")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no CPU and memory requests: %v", c.Resources.Requests)
	}
	for probe, path := range map[*v1.Probe]string{c.LivenessProbe: "/livez", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Scheme != v1.URISchemeHTTPS ||
			containerPort(c, probe.HTTPGet.Port.String()) != 10259 {
			t.Errorf("want a probe of %s over HTTPS on port 10259, got %+v", path, probe)
		}
	}

	configPath := checkSchedulerArgs(t, c.Args)
	mount := slices.IndexFunc(c.VolumeMounts, func(m v1.VolumeMount) bool { return filepath.Dir(configPath) == m.MountPath })
	if mount < 0 {
		t.Fatalf("--config=%s is not in a mounted volume", configPath)
	}
	volume := slices.IndexFunc(pod.Volumes, func(v v1.Volume) bool { return v.Name == c.VolumeMounts[mount].Name })
	if volume < 0 || pod.Volumes[volume].ConfigMap == nil {
		t.Fatalf("--config=%s is not from a ConfigMap", configPath)
	}
	var cm v1.ConfigMap
	findObject(t, objs, "ConfigMap", pod.Volumes[volume].ConfigMap.Name, &cm)
	raw, ok := cm.Data[filepath.Base(configPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Name, filepath.Base(configPath))
	}
	cfg := checkSchedulerConfig(t, "ConfigMap "+cm.Name, []byte(raw), profiles)
	if !cfg.LeaderElection.LeaderElect {
		t.Error("leader election is off")
	}
	return cfg
}

// containerPort resolves a probe's port, a number or a port name.
func containerPort(c v1.Container, port string) int32 {
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort
		}
	}
	var n int32
	for _, r := range port {
		if r < '0' || r > '9' {
			return 0
		}
		n = n*10 + r - '0'
	}
	return n
}
