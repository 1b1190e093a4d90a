// Package runtime runs a real containerd (CRI, NRI, runc) through
// internal/critest and checks what NRI adjustments become in the final OCI
// spec of a created container. It needs root and .ci/containerd.sh's
// binaries; without them it skips (fails under CI=true).
package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/gpusched/gpusched/internal/critest"
)

// Annotations on a container that tell envPlugin what to do with
// NVIDIA_VISIBLE_DEVICES.
const (
	annSet    = "critest.gpusched.io/set-nvidia-visible-devices"    // AddEnv this value
	annRemove = "critest.gpusched.io/remove-nvidia-visible-devices" // "true": RemoveEnv first
	annCDI    = "critest.gpusched.io/cdi-device"                    // AddCDIDevice this name
)

// envPlugin is a trivial NRI plugin: at CreateContainer it records the env
// the runtime showed it and, as the container's annotations say, removes
// and/or sets NVIDIA_VISIBLE_DEVICES (else its default value, if any).
type envPlugin struct {
	value  string
	synced chan struct{}
	once   sync.Once

	mu   sync.Mutex
	seen map[string][]string // container name -> env given to the plugin
}

func (p *envPlugin) Synchronize(_ context.Context, _ []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	p.once.Do(func() { close(p.synced) })
	return nil, nil
}

func (p *envPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.mu.Lock()
	p.seen[ctr.GetName()] = append([]string(nil), ctr.GetEnv()...)
	p.mu.Unlock()
	adj := &api.ContainerAdjustment{}
	if ctr.GetAnnotations()[annRemove] == "true" {
		adj.RemoveEnv("NVIDIA_VISIBLE_DEVICES")
	}
	value := p.value
	if v, ok := ctr.GetAnnotations()[annSet]; ok {
		value = v
	}
	if value != "" {
		adj.AddEnv("NVIDIA_VISIBLE_DEVICES", value)
	}
	if d := ctr.GetAnnotations()[annCDI]; d != "" {
		adj.AddCDIDevice(&api.CDIDevice{Name: d})
	}
	return adj, nil, nil
}

func (p *envPlugin) seenEnv(name string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[name]
}

// connect starts an NRI plugin named name on the runtime's NRI socket and
// waits until the runtime has synchronized it.
func connect(t testing.TB, rt *critest.Runtime, name, value string) *envPlugin {
	t.Helper()
	p := &envPlugin{value: value, synced: make(chan struct{}), seen: map[string][]string{}}
	s, err := stub.New(p, stub.WithPluginName(name), stub.WithPluginIdx("10"), stub.WithSocketPath(rt.NRISocket()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatalf("NRI plugin %s: start: %v", name, err)
	}
	t.Cleanup(func() { s.Stop(); cancel() })
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatalf("NRI plugin %s: not synchronized", name)
	}
	return p
}

func envValues(env []string, key string) []string {
	var out []string
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok && k == key {
			out = append(out, v)
		}
	}
	return out
}

// TestNRIEnvInFinalSpec records what process.env of the final spec holds for
// NVIDIA_VISIBLE_DEVICES when the image sets it to "all" (as nvidia/cuda
// images do), the CRI request may set it again, and an NRI plugin sets or
// removes it. want pins what containerd v2.2.9 (NRI v0.11.0) and v2.3.7
// (NRI v0.12.0) do; the
// behaviour with a duplicated key is the runtime's, not what a plugin asks:
// CRI appends its env after the image's without deduplicating, and NRI's
// AdjustEnv (nri pkg/runtime-tools/generate) replaces the first duplicate
// with the plugin's value and then re-adds the later ones, which overwrite
// it, so the plugin's value is lost and the duplicates collapse into one.
// A plugin's RemoveEnv of a variable the spec already has is dropped by the
// adaptation (only earlier plugins' adjustments are cleared), so it is a
// no-op in the final spec.
func TestNRIEnvInFinalSpec(t *testing.T) {
	start := time.Now()
	rt := critest.Start(t)
	p := connect(t, rt, "critest-env", "")
	cuda := rt.ImportImage(t, []string{"NVIDIA_VISIBLE_DEVICES=all"})
	plain := rt.ImportImage(t, nil)
	sb := rt.RunSandbox(t, "envpod", "default", nil)

	nvd := func(v string) []*critest.KeyValue {
		return []*critest.KeyValue{critest.Env("NVIDIA_VISIBLE_DEVICES", v)}
	}
	set := func(v string) map[string]string { return map[string]string{annSet: v} }
	remove := map[string]string{annRemove: "true"}
	removeSet := map[string]string{annRemove: "true", annSet: "void"}
	cases := []struct {
		name        string
		image       string
		criEnv      []*critest.KeyValue
		annotations map[string]string
		want        []string // NVIDIA_VISIBLE_DEVICES values in the final process.env, in order
	}{
		{"image-noplugin", cuda, nil, nil, []string{"all"}},
		{"image-void", cuda, nil, set("void"), []string{"void"}},
		{"image-remove", cuda, nil, remove, []string{"all"}},
		{"cri-void", plain, nvd("all"), set("void"), []string{"void"}},
		{"image-cri-noplugin", cuda, nvd("all"), nil, []string{"all", "all"}},
		{"image-cri-void", cuda, nvd("all"), set("void"), []string{"all"}},
		{"image-cri0-void", cuda, nvd("0"), set("void"), []string{"0"}},
		{"image-cri-remove", cuda, nvd("all"), remove, []string{"all", "all"}},
		{"image-cri-remove-void", cuda, nvd("all"), removeSet, []string{"all"}},
	}
	for _, c := range cases {
		id, err := rt.CreateContainer(t, sb, c.name, c.image, c.criEnv, c.annotations, nil)
		if err != nil {
			t.Fatalf("%s: CreateContainer: %v", c.name, err)
		}
		spec := rt.Spec(t, id)
		if spec.Process == nil {
			t.Fatalf("%s: spec has no process", c.name)
		}
		got := envValues(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES")
		t.Logf("%s: plugin saw %q; final process.env NVIDIA_VISIBLE_DEVICES=%q (full env %q)",
			c.name, envValues(p.seenEnv(c.name), "NVIDIA_VISIBLE_DEVICES"), got, spec.Process.Env)
		if p.seenEnv(c.name) == nil {
			t.Errorf("%s: the NRI plugin was not called", c.name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: final NVIDIA_VISIBLE_DEVICES = %q, want %q", c.name, got, c.want)
		}
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestRequiredPluginMissing: with NRI's default validator requiring a plugin,
// CreateContainer fails while that plugin is not connected and succeeds once
// it is.
func TestRequiredPluginMissing(t *testing.T) {
	const required = "critest-required"
	rt := critest.Start(t, critest.WithRequiredPlugins(required))
	image := rt.ImportImage(t, []string{"NVIDIA_VISIBLE_DEVICES=all"})
	sb := rt.RunSandbox(t, "reqpod", "default", nil)

	_, err := rt.CreateContainer(t, sb, "without", image, nil, nil, nil)
	if err == nil {
		t.Fatalf("CreateContainer succeeded although required NRI plugin %q is not connected", required)
	}
	t.Logf("CreateContainer without %q: %v", required, err)
	if !strings.Contains(err.Error(), required) {
		t.Errorf("error does not name the missing plugin %q: %v", required, err)
	}

	connect(t, rt, required, "")
	if _, err := rt.CreateContainer(t, sb, "with", image, nil, nil, nil); err != nil {
		t.Fatalf("CreateContainer with %q connected: %v", required, err)
	}
}

// TestRequiredPluginAnnotation: with the default validator on and no global
// list, a pod annotated required-plugins.noderesource.dev gets no container
// while the named plugin is missing; an unannotated pod is unaffected.
func TestRequiredPluginAnnotation(t *testing.T) {
	const required = "critest-annotated"
	rt := critest.Start(t, critest.WithDefaultValidator())
	image := rt.ImportImage(t, nil)
	gpuPod := rt.RunSandbox(t, "gpupod", "default", map[string]string{
		"required-plugins.noderesource.dev": `["` + required + `"]`,
	})
	cpuPod := rt.RunSandbox(t, "cpupod", "default", nil)

	_, err := rt.CreateContainer(t, gpuPod, "gpu", image, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), required) {
		t.Fatalf("CreateContainer in the annotated pod without %q: err = %v, want a refusal naming it", required, err)
	}
	if _, err := rt.CreateContainer(t, cpuPod, "cpu", image, nil, nil, nil); err != nil {
		t.Fatalf("CreateContainer in the unannotated pod: %v", err)
	}
	connect(t, rt, required, "")
	if _, err := rt.CreateContainer(t, gpuPod, "gpu2", image, nil, nil, nil); err != nil {
		t.Fatalf("CreateContainer in the annotated pod with %q connected: %v", required, err)
	}
}

// TestCDIEnvInFinalSpec: a CDI device whose edits set NVIDIA_VISIBLE_DEVICES,
// asked for by the CRI request or injected by an NRI plugin, on an image
// that sets it to "all" with the CRI env setting it again. want pins what
// containerd v2.2.9 does: CDI's env edits are appended after whatever the
// spec already has, never replacing it, so the device's value is the last of
// several entries.
func TestCDIEnvInFinalSpec(t *testing.T) {
	rt := critest.Start(t)
	spec := `{"cdiVersion": "0.6.0", "kind": "critest.gpusched.io/gpu", "devices": [
		{"name": "0", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void", "CRITEST_CDI=0"]}}]}`
	if err := os.WriteFile(filepath.Join(rt.CDIDir(), "critest.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	p := connect(t, rt, "critest-cdi", "")
	cuda := rt.ImportImage(t, []string{"NVIDIA_VISIBLE_DEVICES=all"})
	sb := rt.RunSandbox(t, "cdipod", "default", nil)
	const dev = "critest.gpusched.io/gpu=0"
	nvd := []*critest.KeyValue{critest.Env("NVIDIA_VISIBLE_DEVICES", "all")}

	cases := []struct {
		name        string
		criEnv      []*critest.KeyValue
		criCDI      []string
		annotations map[string]string
		want        []string
	}{
		{"cri-cdi", nil, []string{dev}, nil, []string{"all", "void"}},
		{"cri-cdi-dup", nvd, []string{dev}, nil, []string{"all", "all", "void"}},
		{"nri-cdi", nil, nil, map[string]string{annCDI: dev}, []string{"all", "void"}},
		{"nri-cdi-dup", nvd, nil, map[string]string{annCDI: dev}, []string{"all", "all", "void"}},
	}
	for _, c := range cases {
		id, err := rt.CreateContainer(t, sb, c.name, cuda, c.criEnv, c.annotations, c.criCDI)
		if err != nil {
			t.Fatalf("%s: CreateContainer: %v", c.name, err)
		}
		s := rt.Spec(t, id)
		got := envValues(s.Process.Env, "NVIDIA_VISIBLE_DEVICES")
		t.Logf("%s: plugin saw %q; final process.env NVIDIA_VISIBLE_DEVICES=%q (full env %q)",
			c.name, envValues(p.seenEnv(c.name), "NVIDIA_VISIBLE_DEVICES"), got, s.Process.Env)
		if len(envValues(s.Process.Env, "CRITEST_CDI")) != 1 {
			t.Errorf("%s: the CDI device's edits are not in the final env", c.name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: final NVIDIA_VISIBLE_DEVICES = %q, want %q", c.name, got, c.want)
		}
	}
}
