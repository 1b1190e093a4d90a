package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusched/gpusched/internal/critest"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// What the probe reports for an NVIDIA device node it opens.
const (
	openOK     = "ok"                      // a real GPU the container may use
	openDenied = "operation not permitted" // refused by the device cgroup
)

// probeReport is what test/runtime/gpuprobe prints.
type probeReport struct {
	Nodes map[string]string `json:"nodes"`
	Made  map[string]string `json:"made"`
	Env   []string          `json:"env"`
}

// realGPU reports whether the test runs on the machine's own GPUs
// (GPUSCHED_REAL_GPU=1: an NVIDIA driver and its device nodes are needed).
// CI has no GPU; the test then runs on go-nvml's DGX H100 mock machine.
func realGPU() bool { return os.Getenv("GPUSCHED_REAL_GPU") == "1" }

// discoverGPUs runs the agent's discovery on the real driver's NVML or on
// the mock machine and returns its snapshot.
func discoverGPUs(t *testing.T) *discovery.Snapshot {
	t.Helper()
	var lib nvml.Interface = nvmlmock.DGXH100()
	if realGPU() {
		lib = nvml.New()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("NVML: %v", ret)
	}
	defer lib.Shutdown()
	m, err := discovery.Discover(lib, discovery.Options{})
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	snap, err := discovery.NewSnapshot(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Devices) == 0 {
		t.Fatal("discovery found no GPUs")
	}
	t.Logf("%s: %s", gpu.AnnotationDevices, snap.Annotation)
	for _, g := range m.GPUs {
		t.Logf("GPU %s (%s): NVML index %d, /dev/nvidia%d, PCI %s, NUMA %d, MIG %v", g.UUID, g.Name, g.Index, g.Minor, g.PCIBusID, g.NUMANode, g.MIGEnabled)
	}
	return snap
}

// writeGPUCDISpec writes the CDI spec the agent's cdi mode names devices
// from, nvidia.com/gpu=<UUID>, as `nvidia-ctk cdi generate
// --device-name-strategy=uuid` would: each GPU's /dev/nvidia<minor>, and
// the driver's control nodes for every device. On the mock machine the nodes
// are given by number (c 195:<minor>), since the host has none.
func writeGPUCDISpec(t *testing.T, rt *critest.Runtime, snap *discovery.Snapshot) {
	t.Helper()
	var b strings.Builder
	b.WriteString("cdiVersion: \"0.6.0\"\nkind: nvidia.com/gpu\ndevices:\n")
	for i, d := range snap.Devices {
		fmt.Fprintf(&b, "- name: %s\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia%d\n", d.UUID, snap.Minors[i])
		if !realGPU() {
			fmt.Fprintf(&b, "      type: c\n      major: 195\n      minor: %d\n", snap.Minors[i])
		}
	}
	if realGPU() {
		var common []string
		for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
			if _, err := os.Stat(p); err == nil {
				common = append(common, "  - path: "+p+"\n")
			}
		}
		if len(common) > 0 {
			b.WriteString("containerEdits:\n  deviceNodes:\n" + strings.Join(common, ""))
		}
	}
	if err := os.WriteFile(filepath.Join(rt.CDIDir(), "nvidia.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestContainersOpenExactlyTheirGPUs runs the node agent (cdi mode) as the
// required NRI plugin of a real containerd with runc, and a probe program in
// real running containers that opens every NVIDIA device node it finds and
// makes its own node for each GPU of the machine: it checks what a container
// can open, not what its spec says.
//   - A pod assigned one GPU opens that GPU's node, and no other GPU even
//     through a node it makes itself (CAP_MKNOD, as the runtime's default
//     capabilities give).
//   - A pod without GPUs opens none.
//   - A tenant's pod that names a GPU's CDI device in its annotations
//     (cdi.k8s.io/..., honoured by the runtime) is refused without an
//     assignment; beside an assignment of another GPU it is created, and
//     the named GPU's node, which the runtime put there before NRI, does
//     not open.
//   - Every container's NVIDIA_VISIBLE_DEVICES is void (the image's all
//     replaced; the GPU comes as a CDI device), and one without GPUs has no
//     NVIDIA node at all.
//
// On the mock machine an open the device cgroup allows fails in the driver
// (no GPU behind the node) and a denied one with EPERM; with
// GPUSCHED_REAL_GPU=1 the allowed open succeeds (docs/node-agent.md records
// a run on an NVIDIA H200).
func TestContainersOpenExactlyTheirGPUs(t *testing.T) {
	snap := discoverGPUs(t)
	rt := critest.Start(t, critest.WithRequiredPlugins(agentnri.PluginName),
		critest.WithTolerateMissingAnnotation(agentnri.AnnotationTolerateMissingAgent))
	writeGPUCDISpec(t, rt, snap)
	probe := os.Getenv("GPUSCHED_GPU_PROBE")
	if probe == "" {
		probe = critest.BuildStatic(t, "gpuprobe", t.TempDir())
	}
	var minors []string
	for _, m := range snap.Minors {
		minors = append(minors, fmt.Sprint(m))
	}
	image := rt.ImportProgram(t, probe, []string{"NVIDIA_VISIBLE_DEVICES=all", "PROBE_MINORS=" + strings.Join(minors, ",")})
	store := &discovery.Store{}
	store.Set(snap)
	startAgentWith(t, rt, store, agentnri.Config{Mode: agentnri.ModeCDI})

	last := len(snap.Devices) - 1
	// run starts the probe in a new pod whose sandbox and container carry
	// annotations.
	run := func(t *testing.T, name string, annotations map[string]string) (probeReport, error) {
		t.Helper()
		sb := rt.RunSandbox(t, name, "ml", annotations)
		id, err := rt.CreateContainer(t, sb, name, image, nil, annotations, nil)
		if err != nil {
			return probeReport{}, err
		}
		if err := rt.StartContainer(t, id); err != nil {
			t.Fatalf("starting the probe: %v", err)
		}
		code, out := rt.WaitExited(t, id, 30*time.Second)
		t.Logf("probe in %s (exit %d): %s", name, code, strings.TrimSpace(out))
		var r probeReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("probe exit %d, output %q: %v", code, out, err)
		}
		return r, nil
	}
	// checkGPUs asserts that the container opens the GPU nodes of the
	// minors in want and no other, present or made by itself.
	checkGPUs := func(t *testing.T, r probeReport, want map[int]bool) {
		t.Helper()
		for i, m := range snap.Minors {
			node := fmt.Sprintf("/dev/nvidia%d", m)
			got, present := r.Nodes[node]
			if want[m] {
				// The mock's nodes have no GPU behind them: the open gets
				// past the device cgroup and fails in the driver (ENXIO
				// without one, ENODEV with a driver that lacks the minor).
				if !present || got == openDenied || (realGPU() && got != openOK) {
					t.Errorf("GPU %s: %s is %q (present %v), want it present and opened (%s on a real GPU, else anything but %q)",
						snap.Devices[i].UUID, node, got, present, openOK, openDenied)
				}
				continue
			}
			// A node the runtime put there before NRI (a CDI device named
			// in annotations) stays in the spec, since NRI cannot remove
			// it; the device cgroup must refuse it.
			if present {
				if got != openDenied {
					t.Errorf("GPU %s: %s is in the container and opens with %q, want %q", snap.Devices[i].UUID, node, got, openDenied)
				}
				continue
			}
			if made := r.Made[fmt.Sprint(m)]; made != openDenied {
				t.Errorf("GPU %s: a node the container made for c 195:%d opens with %q, want %q", snap.Devices[i].UUID, m, made, openDenied)
			}
		}
	}

	t.Run("assigned", func(t *testing.T) {
		d := snap.Devices[last]
		r, err := run(t, "train", map[string]string{gpu.AnnotationAssigned: fmt.Sprintf("node=%s;gpus=%d;uuids=%s", agentNode, d.Index, d.UUID)})
		if err != nil {
			t.Fatal(err)
		}
		checkGPUs(t, r, map[int]bool{snap.Minors[last]: true})
		if !slices.Equal(r.Env, []string{"void"}) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES %v in the container, want [void]: the image's all replaced, the GPU given as a CDI device", r.Env)
		}
		if realGPU() {
			for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm"} {
				if _, err := os.Stat(p); err == nil && r.Nodes[p] != openOK {
					t.Errorf("%s opens with %q in a GPU container, want ok (CUDA needs it)", p, r.Nodes[p])
				}
			}
		}
	})
	t.Run("no-gpus", func(t *testing.T) {
		r, err := run(t, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		checkGPUs(t, r, nil)
		if len(r.Nodes) != 0 || !slices.Equal(r.Env, []string{"void"}) {
			t.Errorf("NVIDIA nodes %v and NVIDIA_VISIBLE_DEVICES %v in a container without GPUs, want none and [void]", r.Nodes, r.Env)
		}
	})
	t.Run("assigned-plus-forged-cdi-annotation", func(t *testing.T) {
		if last == 0 {
			t.Skip("one GPU: no other GPU to forge")
		}
		// GPU 0 is free (train holds the last one, which it names).
		d := snap.Devices[0]
		r, err := run(t, "greedy", map[string]string{
			gpu.AnnotationAssigned: fmt.Sprintf("node=%s;gpus=%d;uuids=%s", agentNode, d.Index, d.UUID),
			"cdi.k8s.io/gpu":       "nvidia.com/gpu=" + snap.Devices[last].UUID,
		})
		if err != nil {
			t.Fatalf("refused (%v); want created, the named GPU's node denied", err)
		}
		checkGPUs(t, r, map[int]bool{snap.Minors[0]: true})
		// The runtime put the named GPU's node in before NRI, and NRI cannot
		// take it out (docs/node-agent.md says so): it is there, denied.
		if node := fmt.Sprintf("/dev/nvidia%d", snap.Minors[last]); r.Nodes[node] != openDenied {
			t.Errorf("%s is %q in the container, want present and %q; if the runtime now removes it, update docs/node-agent.md", node, r.Nodes[node], openDenied)
		}
	})
	t.Run("forged-cdi-annotation", func(t *testing.T) {
		_, err := run(t, "tenant", map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=" + snap.Devices[0].UUID})
		if err == nil || !strings.Contains(err.Error(), "has no assignment") {
			t.Fatalf("a pod without assignment naming a GPU's CDI device: %v; want refused by the agent (has no assignment)", err)
		}
	})
}

// mpsClient runs testdata/mpsclient.py on the host with the CUDA_MPS_*
// variables of env (a container's final environment) and no others of the
// test's, allocating allocMiB on the GPU.
func mpsClient(t *testing.T, env []string, allocMiB int64) map[string]any {
	t.Helper()
	cmd := exec.Command("python3", "testdata/mpsclient.py")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUDA_MPS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "CUDA_MPS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("ALLOC_MIB=%d", allocMiB))
	out, err := cmd.Output()
	var r map[string]any
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("MPS client: %v, %v: %s", err, jerr, out)
	}
	t.Logf("MPS client allocating %d MiB: %s", allocMiB, strings.TrimSpace(string(out)))
	return r
}

// TestMPSShareLimits checks on a real GPU that the MPS settings the agent
// gives a share hold: a client with a 250-milli share's final environment
// (from a real containerd, agent in env mode with --mps-pipe-dir) may use
// about a quarter of the SMs, and allocating more than the share's memory
// fails, while the same allocation by a client of the same daemon without
// the share's limits succeeds.
// The client runs on the host with the container's CUDA_MPS_* variables
// (the test image has no CUDA). It needs GPUSCHED_REAL_GPU=1, python3 and an
// MPS control daemon whose pipe directory GPUSCHED_MPS_PIPE_DIR names
// (hack/gpu-node-check.sh starts one); it skips otherwise, in CI too.
func TestMPSShareLimits(t *testing.T) {
	pipeDir := os.Getenv("GPUSCHED_MPS_PIPE_DIR")
	if !realGPU() || pipeDir == "" {
		t.Skip("needs a real GPU (GPUSCHED_REAL_GPU=1) and an MPS control daemon (GPUSCHED_MPS_PIPE_DIR)")
	}
	snap := discoverGPUs(t)
	rt := critest.Start(t)
	image := rt.ImportImage(t, nil)
	store := &discovery.Store{}
	store.Set(snap)
	startAgentWith(t, rt, store, agentnri.Config{Mode: agentnri.ModeEnv, MPSPipeDir: pipeDir})

	d := snap.Devices[0]
	shareMiB := d.MemoryMiB / 8
	env := func(name, assignment string) []string {
		sb := rt.RunSandbox(t, name, "ml", map[string]string{gpu.AnnotationAssigned: assignment})
		id, err := rt.CreateContainer(t, sb, name, image, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rt.Spec(t, id).Process.Env
	}
	share := env("share", fmt.Sprintf("node=%s;gpus=%d;milli=250;memory=%d;uuids=%s", agentNode, d.Index, shareMiB, d.UUID))
	// A client of the same daemon without the share's limits.
	unlimited := []string{agentnri.EnvMPSPipeDir + "=" + pipeDir}

	over := shareMiB * 11 / 10
	control := mpsClient(t, unlimited, over)
	if control["alloc"] != "ok" || control["smCount"] != control["deviceSMs"] {
		t.Fatalf("a client without the share's limits allocating %d MiB: %v on %v of %v SMs, want ok on all (else a share's limits prove nothing)",
			over, control["alloc"], control["smCount"], control["deviceSMs"])
	}
	// Most of the share: the context itself takes some of the limit.
	within := mpsClient(t, share, shareMiB*8/10)
	if within["alloc"] != "ok" {
		t.Errorf("a share allocating %d of its %d MiB: %v, want ok", shareMiB*8/10, shareMiB, within["alloc"])
	}
	// Under MPS a client's device reports the SMs it may use: the whole
	// GPU's for the unlimited client, a quarter (MPS rounds to its own
	// granularity) for the share.
	if sms, all := within["smCount"].(float64), control["smCount"].(float64); sms <= 0 || sms > math.Ceil(all/4)+1 {
		t.Errorf("a 250-milli share's context may use %v of the GPU's %v SMs, want at most a quarter", sms, all)
	}
	beyond := mpsClient(t, share, over)
	if beyond["alloc"] != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("a share allocating %d MiB, a tenth over its %d: %v, want CUDA_ERROR_OUT_OF_MEMORY", over, shareMiB, beyond["alloc"])
	}
}
