package nri_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNRIExclusive: the node refuses a GPU that another live pod holds,
// whatever the assignment says: a whole GPU held by anyone, shares summing
// over 1000 milli or over the GPU's 81559 MiB. Containers of the same pod
// share its GPUs; a stopped container of a running pod keeps them (it may
// start again); a GPU is free again once its holder's containers are
// removed or its pod sandbox stops.
func TestNRIExclusive(t *testing.T) {
	r := startRuntime(t)
	startAgent(t, r, agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, eightGPUs(t))
	whole := func(name string, gpus string) *api.PodSandbox {
		return pod("ml", name, map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=" + gpus})
	}
	share := func(name string, milli, mib int) *api.PodSandbox {
		return pod("ml", name, map[string]string{gpu.AnnotationMilli: "1", gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=4;milli=" +
			itoa(milli) + ";memory=" + itoa(mib)})
	}
	steps := []struct {
		what    string
		pod     *api.PodSandbox
		ctr     string
		stop    string   // stop this container first
		remove  string   // remove this container first
		stopPod string   // stop this container's pod sandbox first
		wantErr []string // nil: created
	}{
		{what: "a whole pod takes GPUs 0,1", pod: whole("a", "0,1"), ctr: "a1"},
		{what: "its second container shares them", pod: whole("a", "0,1"), ctr: "a2"},
		{what: "a stale assignment of GPU 1 to another pod", pod: whole("b", "1,2"), ctr: "b1",
			wantErr: []string{"GPU " + uuid(1) + " is held by live pods ml/a (1000 milli, 0 MiB)", "pass 1000 milli"}},
		{what: "a share on GPU 0, held whole", pod: pod("ml", "c", map[string]string{gpu.AnnotationMilli: "100",
			gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=0;milli=100"}), ctr: "c1", wantErr: []string{"is held by live pods ml/a"}},
		{what: "a share of 600 milli, 40000 MiB on GPU 4", pod: share("s1", 600, 40000), ctr: "s1"},
		{what: "a share of 400 milli, 40000 MiB beside it: 1000 milli, 80000 MiB", pod: share("s2", 400, 40000), ctr: "s2"},
		{what: "one milli more: 1001 milli", pod: share("s3", 1, 0), ctr: "s3",
			wantErr: []string{"ml/s1 (600 milli, 40000 MiB), ml/s2 (400 milli, 40000 MiB)", "pass 1000 milli"}},
		{what: "s2 crashes (stopped, its pod runs): 500 milli more is 1500", stop: "s2", pod: share("s4", 500, 1000), ctr: "s4",
			wantErr: []string{"ml/s2 (400 milli, 40000 MiB)", "pass 1000 milli"}},
		{what: "s2's pod ends; 500 milli and 1000 MiB beside s1: 1100 milli", stopPod: "s2", pod: share("s4", 500, 1000), ctr: "s4",
			wantErr: []string{"pass 1000 milli"}},
		{what: "400 milli and 41560 MiB: 81560 MiB, one over the GPU's", pod: share("s5", 400, 41560), ctr: "s5",
			wantErr: []string{"pass its 81559 MiB"}},
		{what: "400 milli and 41559 MiB: exactly the GPU", pod: share("s6", 400, 41559), ctr: "s6"},
		{what: "a1 is removed; a2 still holds GPU 1", remove: "a1", pod: whole("b", "1,2"), ctr: "b1",
			wantErr: []string{"is held by live pods ml/a"}},
		{what: "a's pod ends", stopPod: "a2", pod: whole("b", "1,2"), ctr: "b1"},
	}
	for _, s := range steps {
		if s.stop != "" {
			b := r.nri.BlockPluginSync()
			_, err := r.nri.StopContainer(context.Background(), &api.StopContainerRequest{Pod: r.pods[r.ctrs[s.stop].PodSandboxId], Container: r.ctrs[s.stop]})
			b.Unblock()
			if err != nil {
				t.Fatalf("%s: stopping %s: %v", s.what, s.stop, err)
			}
		}
		if s.remove != "" {
			b := r.nri.BlockPluginSync()
			err := r.nri.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: r.pods[r.ctrs[s.remove].PodSandboxId], Container: r.ctrs[s.remove]})
			b.Unblock()
			if err != nil {
				t.Fatalf("%s: removing %s: %v", s.what, s.remove, err)
			}
			delete(r.ctrs, s.remove)
		}
		if s.stopPod != "" {
			if err := r.stopPod(r.pods[r.ctrs[s.stopPod].PodSandboxId]); err != nil {
				t.Fatalf("%s: stopping the pod of %s: %v", s.what, s.stopPod, err)
			}
		}
		_, err := r.create(s.pod, container(s.ctr))
		switch {
		case s.wantErr == nil && err != nil:
			t.Fatalf("%s: refused: %v", s.what, err)
		case s.wantErr != nil && err == nil:
			t.Fatalf("%s: created, want refused", s.what)
		}
		for _, want := range s.wantErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refusal %q does not say %q", s.what, err, want)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
