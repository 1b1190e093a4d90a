package nri_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// FuzzNRIDecide: whatever the sandbox's gpu-assigned and gpu-milli
// annotations and the container's environment hold, Decide never panics;
// a refusal is a *RejectError that names the pod and the annotation; a GPU
// container gets exactly the inventory's UUIDs at the assigned indices.
func FuzzNRIDecide(f *testing.F) {
	f.Add(false, true, "node=gpu-node-0;gpus=0,1;uuids="+uuid(0)+","+uuid(1), false, "", "NVIDIA_VISIBLE_DEVICES=all")
	f.Add(true, true, "node=gpu-node-0;gpus=3;milli=250;memory=1024", true, "250", "")
	f.Add(false, true, "node=gpu-node-0;gpus=9", false, "", "")
	f.Add(true, true, "node=;gpus=", false, "", "")
	f.Add(false, false, "", true, "abc", "GPUSCHED_DEVICE_PLUGIN_GPUS=1")
	f.Add(true, false, "", false, "", "NVIDIA_VISIBLE_DEVICES=GPU-x")
	f.Add(false, false, "", false, "", "NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_VISIBLE_DEVICES=all")
	f.Add(false, true, "node=gpu-node-0;gpus=3;milli=250", true, "250", "CUDA_MPS_PIPE_DIRECTORY=/a\nPATH=/bin\nCUDA_MPS_PIPE_DIRECTORY=/b")
	store := eightGPUs(f)
	f.Fuzz(func(t *testing.T, cdi, hasAssigned bool, assigned string, hasMilli bool, milli, env string) {
		cfg := &agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv, MPSPipeDir: "/run/mps"}
		if cdi {
			cfg.Mode = agentnri.ModeCDI
		}
		annotations := map[string]string{}
		if hasAssigned {
			annotations[gpu.AnnotationAssigned] = assigned
		}
		if hasMilli {
			annotations[gpu.AnnotationMilli] = milli
		}
		d, err := agentnri.Decide(cfg, store.Current(), pod("ml", "p", annotations), container("c", strings.Split(env, "\n")...))
		if err != nil {
			var rej *agentnri.RejectError
			if !errors.As(err, &rej) || rej.Pod != "ml/p" || rej.Subject == "" || !strings.Contains(err.Error(), rej.Subject) ||
				!slices.Contains(agentnri.Reasons, rej.Reason) {
				t.Fatalf("refusal %#v does not name the pod, the annotation or variable, and a known reason", err)
			}
			return
		}
		if key, n := duplicated(env); n > 1 {
			t.Fatalf("a container with %s set %d times was accepted", key, n)
		}
		if !d.GPUPod {
			if len(d.UUIDs) != 0 || len(d.Adjust.GetEnv()) != 1 || d.Adjust.GetEnv()[0].GetValue() != "void" {
				t.Fatalf("a pod without GPUs got %v", d.Adjust)
			}
			return
		}
		if len(d.UUIDs) == 0 || len(d.UUIDs) != len(d.Assignment.Devices) {
			t.Fatalf("assignment %+v gave UUIDs %v", d.Assignment, d.UUIDs)
		}
		for i, index := range d.Assignment.Devices {
			if dev, ok := store.Current().ByIndex(index); !ok || dev.UUID != d.UUIDs[i] {
				t.Fatalf("GPU index %d given as %s", index, d.UUIDs[i])
			}
		}
	})
}

// duplicated is the fuzz test's own count of a GPU variable set more than
// once in a newline-separated environment.
func duplicated(env string) (string, int) {
	count := map[string]int{}
	for _, kv := range strings.Split(env, "\n") {
		k, _, _ := strings.Cut(kv, "=")
		if k == "NVIDIA_VISIBLE_DEVICES" || strings.HasPrefix(k, "CUDA_MPS_") {
			count[k]++
		}
	}
	for k, n := range count {
		if n > 1 {
			return k, n
		}
	}
	return "", 0
}

// FuzzNRIConfine: whatever device node, mount, OCI annotation and exemption
// a tenant's container carries, Decide never panics, exempts only on
// gpusched.io/gpu-unrestricted=true, and an accepted container's adjustment
// denies in the device cgroup every GPU of the node it was not given (all of
// major 195 for a container without GPUs) and removes every NVIDIA CDI
// annotation.
func FuzzNRIConfine(f *testing.F) {
	f.Add("node=gpu-node-0;gpus=2", "/dev/nvidia5", int64(195), int64(5), "/var/run/nvidia-container-devices/GPU-x", "cdi.k8s.io/x", "nvidia.com/gpu=all", "")
	f.Add("", "/dev/nvidia0", int64(195), int64(0), "", "", "", "")
	f.Add("", "/dev/dri/card0", int64(226), int64(0), "/data", "nvidia.cdi.k8s.io/y", "k8s.device-plugin.nvidia.com/gpu=GPU-1", "true")
	f.Add("node=gpu-node-0;gpus=1,2", "/dev/../dev/nvidia7", int64(1), int64(3), "/var/run/nvidia-container-devices/../x", "cdi.k8s.io/a", " nvidia.com/gpu=0 ,x", "yes")
	snap := minorsStore(f)
	f.Fuzz(func(t *testing.T, assigned, devPath string, major, minor int64, mountDest, annKey, annValue, unrestricted string) {
		annotations := map[string]string{}
		if assigned != "" {
			annotations[gpu.AnnotationAssigned] = assigned
		}
		if unrestricted != "" {
			annotations[agentnri.AnnotationUnrestricted] = unrestricted
		}
		ctr := &api.Container{Id: "c", Name: "c", Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: devPath, Type: "c", Major: major, Minor: minor}}}}
		if mountDest != "" {
			ctr.Mounts = []*api.Mount{{Source: "/dev/null", Destination: mountDest, Type: "bind"}}
		}
		if annKey != "" {
			ctr.Annotations = map[string]string{annKey: annValue}
		}
		d, err := agentnri.Decide(&agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, snap, pod("ml", "p", annotations), ctr)
		if err != nil {
			return
		}
		if d.Exempt {
			if unrestricted != "true" {
				t.Fatalf("exempt with %s=%q", agentnri.AnnotationUnrestricted, unrestricted)
			}
			return
		}
		denied := func(m int64) bool {
			for _, r := range d.Adjust.GetLinux().GetResources().GetDevices() {
				if !r.GetAllow() && r.GetType() == "c" && r.GetMajor().GetValue() == 195 && (r.GetMinor() == nil || r.GetMinor().GetValue() == m) {
					return true
				}
			}
			return false
		}
		given := map[int64]bool{}
		for _, u := range d.UUIDs {
			given[int64(snap.Minor(u))] = true
		}
		for _, m := range snap.Minors {
			if !given[int64(m)] && !denied(int64(m)) {
				t.Fatalf("GPU minor %d is neither given (%v) nor denied: %+v", m, d.UUIDs, d.Adjust.GetLinux().GetResources().GetDevices())
			}
		}
		// A key under cdi.k8s.io/ whose value names nvidia.com/gpu=... must go.
		if strings.HasPrefix(annKey, "cdi.k8s.io/") && slices.ContainsFunc(strings.Split(annValue, ","), func(n string) bool {
			return strings.HasPrefix(strings.TrimSpace(n), "nvidia.com/gpu=")
		}) {
			if _, removed := d.Adjust.GetAnnotations()[api.MarkForRemoval(annKey)]; !removed {
				t.Fatalf("CDI annotation %s=%s kept", annKey, annValue)
			}
		}
	})
}
