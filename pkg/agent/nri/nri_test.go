package nri_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

const mpsDir = "/run/nvidia/mps"

// TestNRICreateContainer runs CreateContainer through the runtime's NRI
// adaptation with the agent's plugin connected over a unix socket, and
// checks the adjustment the runtime would apply, or the refusal.
func TestNRICreateContainer(t *testing.T) {
	u2, u3, u5 := uuid(2), uuid(3), uuid(5)
	whole := "node=" + thisNode + ";gpus=2,3;milli=1000;memory=0;uuids=" + u2 + "," + u3
	share := "node=" + thisNode + ";gpus=5;milli=250;memory=20480;uuids=" + u5
	tests := []struct {
		name        string
		mode        agentnri.Mode
		mps         bool
		namespace   string
		annotations map[string]string
		env         []string
		wantEnv     map[string]string // the adjustment's environment, exactly
		wantCDI     []string
		wantMount   bool     // the MPS pipe directory is mounted, read-only
		wantErr     []string // substrings of the refusal
	}{
		{
			name:        "whole GPUs in env mode replace the image's NVIDIA_VISIBLE_DEVICES=all",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: whole},
			env:         []string{"NVIDIA_VISIBLE_DEVICES=all", "PATH=/usr/bin"},
			wantEnv:     map[string]string{"NVIDIA_VISIBLE_DEVICES": u2 + "," + u3},
		},
		{
			name:        "whole GPUs in CDI mode",
			mode:        agentnri.ModeCDI,
			annotations: map[string]string{gpu.AnnotationAssigned: whole},
			wantEnv:     map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
			wantCDI:     []string{"nvidia.com/gpu=" + u2, "nvidia.com/gpu=" + u3},
		},
		{
			name:        "an assignment without UUIDs takes them from the node's inventory",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=7"},
			wantEnv:     map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid(7)},
		},
		{
			name:        "a share on an MPS node: SM percentage, memory limit, pipe directory",
			mode:        agentnri.ModeEnv,
			mps:         true,
			annotations: map[string]string{gpu.AnnotationMilli: "250", gpu.AnnotationAssigned: share},
			wantEnv: map[string]string{
				"NVIDIA_VISIBLE_DEVICES":            u5,
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",       // 250 milli = 25% of the SMs
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=20480M", // the share's memory, on the one visible GPU
				"CUDA_MPS_PIPE_DIRECTORY":           mpsDir,
			},
			wantMount: true,
		},
		{
			name:        "a 1-milli share without memory on an MPS node: 1% rounded up, no memory limit",
			mode:        agentnri.ModeEnv,
			mps:         true,
			annotations: map[string]string{gpu.AnnotationMilli: "1", gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=5;milli=1"},
			wantEnv: map[string]string{
				"NVIDIA_VISIBLE_DEVICES":            u5,
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1",
				"CUDA_MPS_PIPE_DIRECTORY":           mpsDir,
			},
			wantMount: true,
		},
		{
			name:        "a share without MPS gets only its GPU (time-slicing: accounted, not enforced)",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationMilli: "250", gpu.AnnotationAssigned: share},
			wantEnv:     map[string]string{"NVIDIA_VISIBLE_DEVICES": u5},
		},
		{
			name:    "a pod without GPUs sees none, whatever its image says",
			mode:    agentnri.ModeCDI,
			env:     []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantEnv: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
		},
		{
			name:        "an unrestricted pod is left alone",
			mode:        agentnri.ModeEnv,
			namespace:   "gpu-operator",
			annotations: map[string]string{agentnri.AnnotationUnrestricted: "true"},
			env:         []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantEnv:     map[string]string{},
		},
		{
			name:      "a namespace's name exempts nothing",
			mode:      agentnri.ModeEnv,
			namespace: "gpu-operator",
			env:       []string{"NVIDIA_VISIBLE_DEVICES=all"},
			wantEnv:   map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
		},
		{
			name:        "a share without assignment",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationMilli: "250"},
			wantErr:     []string{"pod ml/train", gpu.AnnotationAssigned, "has no assignment", "gpusched.io/gpu-milli is set", "spec.schedulerName"},
		},
		{
			name:    "whole GPUs from the kubelet without assignment",
			mode:    agentnri.ModeEnv,
			env:     []string{agentnri.EnvDevicePluginGPUs + "=2"},
			wantErr: []string{"pod ml/train", gpu.AnnotationAssigned, "has no assignment", "the kubelet allocated nvidia.com/gpu"},
		},
		{
			// A share asked for as a resource and bound by another
			// scheduler: no annotation tells, the shares plugin's mark does.
			name:    "a share from the kubelet without assignment",
			mode:    agentnri.ModeEnv,
			env:     []string{agentnri.EnvDevicePluginMilli + "=250"},
			wantErr: []string{"pod ml/train", gpu.AnnotationAssigned, "has no assignment", "the kubelet allocated gpusched.io/gpu-milli"},
		},
		{
			name:    "GPUs named in the pod's own environment without assignment",
			mode:    agentnri.ModeEnv,
			env:     []string{"NVIDIA_VISIBLE_DEVICES=" + u2},
			wantErr: []string{"pod ml/train", "has no assignment", "NVIDIA_VISIBLE_DEVICES=" + u2 + " is set"},
		},
		{
			name:        "an assignment for another node",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=gpu-node-7;gpus=0"},
			wantErr:     []string{"pod ml/train", gpu.AnnotationAssigned, `names node "gpu-node-7"`, `on node "gpu-node-0"`},
		},
		{
			name:        "an unknown UUID",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2;uuids=GPU-bogus"},
			wantErr:     []string{"pod ml/train", gpu.AnnotationAssigned, "GPU index 2 is " + u2 + " on node gpu-node-0, but the assignment names GPU-bogus"},
		},
		{
			name:        "a UUID at another index (GPUs renumbered)",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=2;uuids=" + u3},
			wantErr:     []string{"the assignment names " + u3, u3 + " is GPU index 3 here"},
		},
		{
			name:        "an index the node does not have",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=9"},
			wantErr:     []string{"pod ml/train", "GPU index 9 is not on node gpu-node-0, which has 8 GPUs"},
		},
		{
			name:        "a malformed assignment",
			mode:        agentnri.ModeEnv,
			annotations: map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=two"},
			wantErr:     []string{"pod ml/train", `invalid gpusched.io/gpu-assigned`, `GPU index "two" is not a non-negative integer`, "want node=<node>"},
		},
	}
	r := startRuntime(t)
	store := eightGPUs(t)
	var stop func()
	current := ""
	for _, tt := range tests {
		// One agent per configuration; it is stopped before the next starts.
		if key := fmt.Sprintf("%s/%v", tt.mode, tt.mps); key != current {
			if stop != nil {
				stop()
			}
			cfg := agentnri.Config{NodeName: thisNode, Mode: tt.mode}
			if tt.mps {
				cfg.MPSPipeDir = mpsDir
			}
			_, stop = startAgent(t, r, cfg, store)
			current = key
		}
		t.Run(tt.name, func(t *testing.T) {
			ns := tt.namespace
			if ns == "" {
				ns = "ml"
			}
			adj, err := r.create(pod(ns, "train", tt.annotations), container("c-"+strings.ReplaceAll(tt.name, " ", "-"), tt.env...))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("container created with %v, want a refusal", adj)
				}
				t.Logf("refusal: %v", err)
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			gotEnv := map[string]string{}
			for _, kv := range adj.GetEnv() {
				gotEnv[kv.GetKey()] = kv.GetValue()
			}
			if !reflect.DeepEqual(gotEnv, tt.wantEnv) {
				t.Errorf("environment %v, want %v", gotEnv, tt.wantEnv)
			}
			var gotCDI []string
			for _, c := range adj.GetCDIDevices() {
				gotCDI = append(gotCDI, c.GetName())
			}
			if !reflect.DeepEqual(gotCDI, tt.wantCDI) {
				t.Errorf("CDI devices %v, want %v", gotCDI, tt.wantCDI)
			}
			if got := hasMount(adj.GetMounts(), mpsDir); got != tt.wantMount {
				t.Errorf("MPS pipe directory mounted: %v, want %v (mounts %v)", got, tt.wantMount, adj.GetMounts())
			}
		})
	}
}

// hasMount reports whether dir is bind-mounted read-only at the same path.
func hasMount(mounts []*api.Mount, dir string) bool {
	for _, m := range mounts {
		if m.GetSource() == dir && m.GetDestination() == dir && m.GetType() == "bind" && slices.Contains(m.GetOptions(), "ro") &&
			!slices.Contains(m.GetOptions(), "rw") {
			return true
		}
	}
	return false
}
