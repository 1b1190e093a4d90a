package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpusched/gpusched/internal/critest"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

const agentNode = "critest-node"

func gpuUUID(i int) string { return fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i) }

// eightGPUs is an 8-GPU node's inventory, /dev/nvidia<i> being GPU i.
func eightGPUs(t testing.TB) *discovery.Store {
	t.Helper()
	devices := make([]gpu.Device, 8)
	for i := range devices {
		devices[i] = gpu.Device{Index: i, UUID: gpuUUID(i), Model: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559}
	}
	snap, err := discovery.SnapshotOf(devices)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Minors {
		snap.Minors[i] = i
	}
	store := &discovery.Store{}
	store.Set(snap)
	return store
}

// startAgent connects the node agent's NRI plugin to the runtime and waits
// until both of its connections are synchronized.
func startAgent(t testing.TB, rt *critest.Runtime) *agentnri.Plugin {
	t.Helper()
	return startAgentWith(t, rt, eightGPUs(t), agentnri.Config{Mode: agentnri.ModeEnv})
}

// startAgentWith is startAgent with the given inventory and configuration
// (its node is agentNode).
func startAgentWith(t testing.TB, rt *critest.Runtime, store *discovery.Store, cfg agentnri.Config) *agentnri.Plugin {
	t.Helper()
	cfg.NodeName = agentNode
	p, err := agentnri.New(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, rt.NRISocket(), 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(15 * time.Second); !p.Ready() || !p.Observing(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not register with containerd's NRI within 15s\n%s", rt.Log())
		}
	}
	return p
}

// writeCDISpec writes a CDI spec of NVIDIA's device plugin's kind with one
// device, GPU 5, whose device node is /dev/nvidia5 (c 195:5, as on a GPU
// node; this machine has no such node, so the spec states type and numbers
// and the runtime does not look for it): what the device plugin hands the
// kubelet under DEVICE_LIST_STRATEGY=cdi-cri. CDI adds the node and allows
// c 195:5 in the container's device cgroup.
func writeCDISpec(t *testing.T, rt *critest.Runtime) string {
	t.Helper()
	spec := `cdiVersion: "0.6.0"
kind: k8s.device-plugin.nvidia.com/gpu
devices:
- name: ` + gpuUUID(5) + `
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia5
      type: c
      major: 195
      minor: 5
      permissions: rwm
`
	if err := os.WriteFile(filepath.Join(rt.CDIDir(), "nvidia-device-plugin.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return "k8s.device-plugin.nvidia.com/gpu=" + gpuUUID(5)
}

// allowedGPUs returns the GPU minors 0..7 the spec's device cgroup lets the
// container open after its last matching rule. Whether a node is in
// linux.devices does not matter: a container with CAP_MKNOD makes its own.
func allowedGPUs(spec *rspec.Spec) []int {
	var allowed []int
	for minor := int64(0); minor < 8; minor++ {
		ok := false
		for _, r := range spec.Linux.Resources.Devices {
			if (r.Type == "c" || r.Type == "a" || r.Type == "") && (r.Major == nil || *r.Major == 195) && (r.Minor == nil || *r.Minor == minor) {
				ok = r.Allow
			}
		}
		if ok {
			allowed = append(allowed, int(minor))
		}
	}
	return allowed
}

// cgroupGPUs reads what the kernel lets a running container open of major
// 195, from its cgroup v1 devices.list; ok is false where the machine has no
// cgroup v1 devices controller (cgroup v2 enforces by a BPF program, which
// cannot be read back).
func cgroupGPUs(t *testing.T, spec *rspec.Spec) (allowed []string, ok bool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/devices", spec.Linux.CgroupsPath, "devices.list"))
	if err != nil {
		t.Logf("no cgroup v1 devices.list for %s: %v", spec.Linux.CgroupsPath, err)
		return nil, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line) // "c 195:5 rwm"
		if len(f) == 3 && (f[0] == "c" || f[0] == "a") && (strings.HasPrefix(f[1], "195:") || strings.HasPrefix(f[1], "*:")) && strings.ContainsAny(f[2], "rw") {
			allowed = append(allowed, f[0]+" "+f[1]+" "+f[2])
		}
	}
	return allowed, true
}

// TestAgentOnContainerd runs gpusched's node agent as the NRI plugin of a
// real containerd with runc, required by the runtime (required_plugins),
// and checks what created containers really get, in their final OCI spec:
//   - with the agent absent, no container is created (fail closed), but
//     the agent's own, which tolerates its absence;
//   - an image's NVIDIA_VISIBLE_DEVICES=all set again in the pod spec is
//     refused (else the pod's value would beat the agent's);
//   - a pod without GPUs gets void;
//   - a GPU pod gets exactly its GPU (the NVIDIA runtime's hook acts on
//     NVIDIA_VISIBLE_DEVICES);
//   - NVIDIA's device plugin's CDI device is GPU demand (refused without an
//     assignment); given to a pod assigned another GPU, its device node stays
//     in the spec (NRI does not forward a plugin's removal of what the
//     runtime put there) but the device cgroup no longer lets it open;
//   - a GPU already held by a live pod is refused to a second pod.
func TestAgentOnContainerd(t *testing.T) {
	rt := critest.Start(t, critest.WithRequiredPlugins(agentnri.PluginName), critest.WithTolerateMissingAnnotation(agentnri.AnnotationTolerateMissingAgent))
	image := rt.ImportImage(t, []string{"NVIDIA_VISIBLE_DEVICES=all"})
	pluginDevice := writeCDISpec(t, rt)

	web := rt.RunSandbox(t, "web", "shop", nil)
	if _, err := rt.CreateContainer(t, web, "before-agent", image, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), `required plugin "gpusched" not present`) {
		t.Fatalf("container created while the agent was absent (%v): want refused by required_plugins", err)
	}
	// The agent's own pod tolerates the missing agent and is unrestricted
	// (annotations the admission policy grants only to chosen
	// ServiceAccounts), as the DaemonSet makes it.
	agentPod := rt.RunSandbox(t, "gpusched-agent-x", "gpusched-system", map[string]string{
		agentnri.AnnotationTolerateMissingAgent: "true", agentnri.AnnotationUnrestricted: "true"})
	if _, err := rt.CreateContainer(t, agentPod, "agent", image, nil, nil, nil); err != nil {
		t.Fatalf("the agent's own container on a node without an agent: %v", err)
	}

	startAgent(t, rt)
	assigned := func(gpus string) map[string]string {
		return map[string]string{gpu.AnnotationAssigned: "node=" + agentNode + ";gpus=" + gpus}
	}
	train := rt.RunSandbox(t, "train", "ml", assigned("2"))
	other := rt.RunSandbox(t, "other", "ml", assigned("2"))
	stray := rt.RunSandbox(t, "stray", "ml", nil)
	cases := []struct {
		name    string
		sandbox string
		env     []*critest.KeyValue
		cdi     []string
		wantErr []string
		wantEnv []string // NVIDIA_VISIBLE_DEVICES in the final spec
	}{
		{name: "tutorial", sandbox: web, env: []*critest.KeyValue{critest.Env("NVIDIA_VISIBLE_DEVICES", "all")},
			wantErr: []string{"NVIDIA_VISIBLE_DEVICES", "2 times"}},
		{name: "plain", sandbox: web, wantEnv: []string{"void"}},
		{name: "worker", sandbox: train, cdi: []string{pluginDevice}, wantEnv: []string{gpuUUID(2)}},
		{name: "plugin-only", sandbox: stray, cdi: []string{pluginDevice}, wantErr: []string{"has no assignment", "/dev/nvidia5"}},
		{name: "second-holder", sandbox: other, wantErr: []string{"GPU " + gpuUUID(2) + " is held by live pods ml/train"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := rt.CreateContainer(t, c.sandbox, c.name, image, c.env, nil, c.cdi)
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("created, with NVIDIA_VISIBLE_DEVICES %v: want refused", envValues(rt.Spec(t, id).Process.Env, "NVIDIA_VISIBLE_DEVICES"))
				}
				for _, want := range c.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// runc applies the device cgroup at start: the agent's rules must
			// be ones it accepts.
			if err := rt.StartContainer(t, id); err != nil {
				t.Errorf("starting the container: %v", err)
			}
			spec := rt.Spec(t, id)
			if got := envValues(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES"); !slices.Equal(got, c.wantEnv) {
				t.Errorf("final NVIDIA_VISIBLE_DEVICES %v, want %v", got, c.wantEnv)
			}
			if allowed, ok := cgroupGPUs(t, spec); ok && len(allowed) != 0 {
				t.Errorf("the running container's device cgroup lets it open GPU device numbers %v", allowed)
			}
			if got := allowedGPUs(spec); len(got) != 0 {
				t.Errorf("the device cgroup lets the container open GPUs %v, want none but those the NVIDIA hook adds at start\n(rules %+v, devices %+v)",
					got, spec.Linux.Resources.Devices, spec.Linux.Devices)
			}
		})
	}
}

// BenchmarkContainerdCreateContainer: one CRI CreateContainer on a real
// containerd (image snapshot, spec, NRI round trip), with gpusched's agent
// as the NRI plugin for a 2-GPU pod and a pod without GPUs, and with a
// plugin that only sets NVIDIA_VISIBLE_DEVICES, for the agent's share of
// the time. Reports p99-ns besides ns/op. Needs what TestAgentOnContainerd
// needs.
func BenchmarkContainerdCreateContainer(b *testing.B) {
	for _, c := range []struct {
		name        string
		agent       bool
		annotations map[string]string
	}{
		{"agent-whole-2", true, map[string]string{gpu.AnnotationAssigned: "node=" + agentNode + ";gpus=2,3"}},
		{"agent-no-gpu", true, nil},
		{"env-plugin", false, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			rt := critest.Start(b)
			image := rt.ImportImage(b, []string{"NVIDIA_VISIBLE_DEVICES=all"})
			if c.agent {
				startAgent(b, rt)
			} else {
				connect(b, rt, "critest-env", "void")
			}
			sb := rt.RunSandbox(b, "bench", "ml", c.annotations)
			var took []time.Duration
			i := 0
			for b.Loop() {
				i++
				start := time.Now()
				id, err := rt.CreateContainer(b, sb, fmt.Sprintf("c%d", i), image, nil, nil, nil)
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				rt.RemoveContainer(b, id)
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
