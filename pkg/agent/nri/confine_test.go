package nri_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	rgen "github.com/opencontainers/runtime-tools/generate"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// What a tenant's container may carry to reach GPUs besides the scheduler's
// assignment: what NVIDIA's device plugin adds under each of its device-list
// strategies, and what a pod spec or image can add by itself.
var (
	// the device plugin's CDI device (DEVICE_LIST_STRATEGY=cdi-cri).
	pluginCDI = &api.CDIDevice{Name: "k8s.device-plugin.nvidia.com/gpu=" + uuid(5)}
	// the device plugin's CDI annotation (cdi-annotations).
	pluginCDIAnnotation = map[string]string{"cdi.k8s.io/nvidia-device-plugin_" + uuid(5): "k8s.device-plugin.nvidia.com/gpu=" + uuid(5)}
	// the device plugin's device list (volume-mounts).
	pluginListMount = &api.Mount{Source: "/dev/null", Destination: "/var/run/nvidia-container-devices/" + uuid(5), Type: "bind", Options: []string{"bind", "ro"}}
)

// gpuNode is /dev/nvidia<minor> as a device plugin passes it
// (--pass-device-specs).
func gpuNode(minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: fmt.Sprintf("/dev/nvidia%d", minor), Type: "c", Major: 195, Minor: minor}
}

// minorsStore is eightGPUs' snapshot with /dev/nvidia<i> as GPU i's device
// node.
func minorsStore(t testing.TB) *discovery.Snapshot {
	snap := eightGPUs(t).Current()
	for i := range snap.Minors {
		snap.Minors[i] = i
	}
	return snap
}

// finalSpec applies d's adjustment to the spec the runtime built for ctr,
// with NRI's spec generator over runtime-tools' as containerd does, and
// returns the spec and the CDI devices the runtime injects. The spec starts
// from a device cgroup that allows every GPU (c 195:*), as on a runtime
// configured to let containers reach them; what the container may reach at
// the end is the agent's doing.
func finalSpec(t *testing.T, ctr *api.Container, adj *api.ContainerAdjustment) (*rspec.Spec, []string) {
	t.Helper()
	major := int64(195)
	spec := &rspec.Spec{Process: &rspec.Process{Env: slices.Clone(ctr.GetEnv())}, Annotations: map[string]string{},
		Linux: &rspec.Linux{Resources: &rspec.LinuxResources{Devices: []rspec.LinuxDeviceCgroup{{Allow: true, Type: "c", Major: &major, Access: "rwm"}}}}}
	for k, v := range ctr.GetAnnotations() {
		spec.Annotations[k] = v
	}
	for _, d := range ctr.GetLinux().GetDevices() {
		spec.Linux.Devices = append(spec.Linux.Devices, d.ToOCI())
		spec.Linux.Resources.Devices = append(spec.Linux.Resources.Devices, rspec.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &d.Major, Minor: &d.Minor, Access: "rwm"})
	}
	for _, m := range ctr.GetMounts() {
		spec.Mounts = append(spec.Mounts, m.ToOCI(nil))
	}
	var cdi []string
	g := rgen.NewFromSpec(spec)
	if err := nrigen.SpecGenerator(&g, nrigen.WithCDIDeviceInjector(func(_ *rspec.Spec, names []string) error {
		cdi = append(cdi, names...)
		return nil
	})).Adjust(adj); err != nil {
		t.Fatal(err)
	}
	return spec, cdi
}

// allowedGPUs returns the GPUs 0..7 the final spec's device cgroup lets the
// container open (c 195:<minor>). Whether the device node is in the spec
// does not matter: a container with CAP_MKNOD makes its own. Device rules
// apply in order; the last match decides.
func allowedGPUs(spec *rspec.Spec) []int {
	var allowed []int
	for minor := int64(0); minor < 8; minor++ {
		ok := false
		for _, r := range spec.Linux.Resources.Devices {
			if (r.Type == "c" || r.Type == "a") && (r.Major == nil || *r.Major == 195) && (r.Minor == nil || *r.Minor == minor) {
				ok = r.Allow
			}
		}
		if ok {
			allowed = append(allowed, int(minor))
		}
	}
	return allowed
}

// TestConfineFinalSpec: whatever a container carries from NVIDIA's device
// plugin or its own spec, the spec the runtime ends up with, after NRI has
// merged the agent's adjustment, lets it open exactly the GPUs of its
// assignment, and NVIDIA CDI annotations are gone.
func TestConfineFinalSpec(t *testing.T) {
	assigned := map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2;uuids=" + uuid(2)}
	tests := []struct {
		name        string
		mode        agentnri.Mode
		annotations map[string]string
		ctr         *api.Container
		wantAllowed []int // GPUs the device cgroup lets the container open
		wantCDI     []string
		wantVisible []string // NVIDIA_VISIBLE_DEVICES in the final spec
	}{
		{
			name:        "the device plugin passed GPU 5's node to a pod assigned GPU 2 (env mode)",
			mode:        agentnri.ModeEnv,
			annotations: assigned,
			ctr:         &api.Container{Id: "a", Env: []string{"NVIDIA_VISIBLE_DEVICES=" + uuid(5)}, Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{gpuNode(5)}}},
			wantAllowed: []int{2}, // the runtime's c 195:* less the agent's denies of 0,1,3..7
			wantVisible: []string{uuid(2)},
		},
		{
			name:        "the device plugin passed GPU 2's own node: kept",
			mode:        agentnri.ModeEnv,
			annotations: assigned,
			ctr:         &api.Container{Id: "b", Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{gpuNode(2)}}},
			wantAllowed: []int{2},
			wantVisible: []string{uuid(2)},
		},
		{
			name:        "a CDI annotation of GPU 5 (CDI mode)",
			mode:        agentnri.ModeCDI,
			annotations: assigned,
			ctr:         &api.Container{Id: "c", Annotations: pluginCDIAnnotation},
			wantAllowed: []int{2},
			wantCDI:     []string{"nvidia.com/gpu=" + uuid(2)},
			wantVisible: []string{"void"},
		},
		{
			name:        "a pod without GPUs, with the image's all: no GPU by env or device cgroup",
			mode:        agentnri.ModeEnv,
			ctr:         &api.Container{Id: "d", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
			wantVisible: []string{"void"},
		},
	}
	r := startRuntime(t)
	store := eightGPUs(t)
	for i := range store.Current().Minors {
		store.Current().Minors[i] = i
	}
	for _, mode := range []agentnri.Mode{agentnri.ModeEnv, agentnri.ModeCDI} {
		_, stop := startAgent(t, r, agentnri.Config{NodeName: thisNode, Mode: mode}, store)
		for _, tt := range tests {
			if tt.mode != mode {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				// One pod throughout (its containers share GPU 2), as a pod
				// with several containers.
				adj, err := r.create(pod("ml", "p", tt.annotations), proto.Clone(tt.ctr).(*api.Container))
				if err != nil {
					t.Fatal(err)
				}
				spec, cdi := finalSpec(t, tt.ctr, adj)
				if got := allowedGPUs(spec); !slices.Equal(got, tt.wantAllowed) {
					t.Errorf("final spec lets the container open GPUs %v, want %v\n(rules %+v)", got, tt.wantAllowed, spec.Linux.Resources.Devices)
				}
				if !slices.Equal(cdi, tt.wantCDI) {
					t.Errorf("CDI devices %v, want %v", cdi, tt.wantCDI)
				}
				var visible []string
				for _, kv := range spec.Process.Env {
					if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
						visible = append(visible, v)
					}
				}
				if !slices.Equal(visible, tt.wantVisible) {
					t.Errorf("NVIDIA_VISIBLE_DEVICES %v, want %v", visible, tt.wantVisible)
				}
				for k := range spec.Annotations {
					if strings.HasPrefix(k, "cdi.k8s.io/") {
						t.Errorf("CDI annotation %s kept", k)
					}
				}
			})
		}
		stop()
	}
}

// TestDecideRefusesTenantGPUPaths: every way a container can reach GPUs
// without an assignment is GPU demand, and refused; so is a duplicated GPU
// variable, and a malformed exemption.
func TestDecideRefusesTenantGPUPaths(t *testing.T) {
	snap := minorsStore(t)
	assigned := map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2", gpu.AnnotationMilli: "500"}
	tests := []struct {
		name        string
		annotations map[string]string
		ctr         *api.Container
		wantReason  string
		wantErr     []string
	}{
		{"the device plugin's CDI device", nil, &api.Container{CDIDevices: []*api.CDIDevice{pluginCDI}},
			agentnri.ReasonMissing, []string{"CDI device k8s.device-plugin.nvidia.com/gpu=" + uuid(5) + " is requested"}},
		{"the device plugin's CDI annotation", nil, &api.Container{Annotations: pluginCDIAnnotation},
			agentnri.ReasonMissing, []string{"asks for CDI devices"}},
		{"a GPU device node", nil, &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{gpuNode(3)}}},
			agentnri.ReasonMissing, []string{"device node /dev/nvidia3 is in the container"}},
		{"a volume-mount device list", nil, &api.Container{Mounts: []*api.Mount{pluginListMount}},
			agentnri.ReasonMissing, []string{"device list /var/run/nvidia-container-devices/" + uuid(5) + " is mounted"}},
		{"a volume-mount device list of another GPU than the assigned", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2"},
			&api.Container{Mounts: []*api.Mount{pluginListMount}},
			agentnri.ReasonForeignDevices, []string{"/var/run/nvidia-container-devices/" + uuid(5) + ": the container carries a device-list mount", "DEVICE_LIST_STRATEGY=volume-mounts"}},
		{"NVIDIA_VISIBLE_DEVICES from image and pod spec", nil,
			&api.Container{Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "HOME=/", "NVIDIA_VISIBLE_DEVICES=all"}},
			agentnri.ReasonDuplicateEnv, []string{"NVIDIA_VISIBLE_DEVICES: the container's environment sets NVIDIA_VISIBLE_DEVICES 2 times"}},
		{"an MPS limit set twice on a share", assigned,
			&api.Container{Env: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"}},
			agentnri.ReasonDuplicateEnv, []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 2 times"}},
		{"a malformed exemption", map[string]string{agentnri.AnnotationUnrestricted: "yes"}, &api.Container{},
			agentnri.ReasonUnrestricted, []string{agentnri.AnnotationUnrestricted + `: "yes" is not allowed: want "true"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agentnri.Decide(&agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, snap, pod("ml", "p", tt.annotations), tt.ctr)
			var rej *agentnri.RejectError
			if !errors.As(err, &rej) || rej.Reason != tt.wantReason {
				t.Fatalf("error %v, want a refusal for %s", err, tt.wantReason)
			}
			for _, want := range append(tt.wantErr, "pod ml/p") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
		})
	}
}
