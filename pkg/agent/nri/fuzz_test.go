package nri_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

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
