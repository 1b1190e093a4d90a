package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/internal/schedconfig"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestFailoverScheduler runs two gpusched processes (the binary built from
// cmd/gpusched) with leader election on the Lease kube-system/gpusched,
// against the in-process API server, with examples/gpusched-gang-config.yaml
// (GPUPlacement and GPUGang; gangConfig's short gang timeouts).
//
// The leader is killed with SIGKILL once per wave of pods, at a random
// point of the wave: after 1 to half of its pods have been bound, once the
// standby has synced and campaigns. A new process replaces the dead one at
// once, as a Deployment's would. A wave is 100 pods (30 beyond ten kills):
// pods asking for one or two whole GPUs or a 250 or 500 milli-GPU share
// (gpusched.io/gpu-milli, burstShapes), and a gang of four 1-GPU pods (a
// PodGroup of minMember 4), on 32 nodes of 8 GPUs per 300 pods, filled to
// 75-80%. After each kill another process must take the Lease and bind
// within 30 s, with no GPU allocated beyond its capacity (summed from every
// bound pod's gpusched.io/gpu-assigned annotation); at the end every pod
// must be bound, still within every GPU's capacity. The time from each
// kill to the next bind is logged, with its median and maximum.
//
// Leases: 4 s lease duration, 3 s renew deadline, 1 s retry period (see
// failoverLeaseDuration). The leader is killed 3 times by default (300
// pods); set GPUSCHED_FAILOVER_KILLS=20 for 20 kills (600 pods; give go
// test -timeout 30m), and GPUSCHED_FAILOVER_REPORT=FILE to append the
// figures to FILE:
//
//	GPUSCHED_FAILOVER_KILLS=20 go test -count=1 -timeout 30m -run 'TestFailoverScheduler$' ./test/e2e/ -v
func TestFailoverScheduler(t *testing.T) {
	ctx := context.Background()
	kills := failoverKills(t)
	bin := buildCommand(t, "gpusched")
	c := testcluster.Start(t)
	ensureNamespace(ctx, t, c, "kube-system")
	for _, n := range failoverNodes(kills * failoverWaveSize(kills)) {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	dyn := installPodGroupCRD(ctx, t, c)

	const gangSize = 4
	var waves [][]*v1.Pod
	for i := range kills {
		wave := wavePods(i, failoverWaveSize(kills)-gangSize)
		group := wavePrefix(i) + "gang"
		createPodGroup(ctx, t, dyn, group, gangSize, 0)
		for j := range gangSize {
			wave = append(wave, gangPod(fmt.Sprintf("%s-%d", group, j), group, 1))
		}
		waves = append(waves, wave)
	}

	config := failoverSchedulerConfig(t, c)
	replicas := startReplicaSet(t, "gpusched", replicaSpec{
		bin:  bin,
		args: func(int) []string { return []string{"--config", config, "--secure-port=0"} },
		// kube-scheduler campaigns once its informers have synced.
		warm: func(ctx context.Context, r *replica) error { return waitForFlag(ctx, &r.campaigning) },
	})
	runFailover(ctx, t, c, replicas, schedulerName, waves)
}

// TestFailoverExtender runs two gpusched-extender processes (the binary
// built from cmd/gpusched-extender, with --leader-elect on the Lease
// kube-system/gpusched-extender) behind a loopback stand-in for their
// Service, and the stock kube-scheduler in-process with
// deploy/extender/scheduler-config.yaml pointing at it, as
// TestExtenderGPUPlacement does. The Service sends each call to the
// replicas in turn, ready ones only (/readyz), so the one without the
// Lease answers half the binds with an error and the scheduler retries
// those pods, as docs/extender.md says of two replicas.
//
// Waves, kills, checks, leases and environment variables are
// TestFailoverScheduler's, without gangs (gang scheduling is the GPUGang
// plugin, which the extender does not have):
//
//	GPUSCHED_FAILOVER_KILLS=20 go test -count=1 -timeout 30m -run 'TestFailoverExtender$' ./test/e2e/ -v
func TestFailoverExtender(t *testing.T) {
	ctx := context.Background()
	kills := failoverKills(t)
	bin := buildCommand(t, "gpusched-extender")
	c := testcluster.Start(t)
	ensureNamespace(ctx, t, c, "kube-system")
	for _, n := range failoverNodes(kills * failoverWaveSize(kills)) {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	var waves [][]*v1.Pod
	for i := range kills {
		waves = append(waves, wavePods(i, failoverWaveSize(kills)))
	}

	endpoints := []string{freeLoopbackAddr(t), freeLoopbackAddr(t)}
	service := startLoopbackService(t, endpoints)
	replicas := startReplicaSet(t, "gpusched-extender", replicaSpec{
		bin: bin,
		args: func(slot int) []string {
			return []string{
				"--kubeconfig", c.KubeconfigPath, "--bind-address", endpoints[slot],
				"--leader-elect",
				"--leader-elect-lease-duration", failoverLeaseDuration.String(),
				"--leader-elect-renew-deadline", failoverRenewDeadline.String(),
				"--leader-elect-retry-period", failoverRetryPeriod.String(),
			}
		},
		// The extender campaigns at once and is ready once its informers
		// have synced.
		warm: func(ctx context.Context, r *replica) error {
			if err := waitForFlag(ctx, &r.campaigning); err != nil {
				return err
			}
			return waitForReadyz(ctx, endpoints[r.slot])
		},
		onWarm: func(slot int) { service.setReady(slot, true) },
		onGone: func(slot int) { service.setReady(slot, false) },
	})
	c.StartScheduler(ctx, t, extenderConfig(t, service.addr(), true))
	runFailover(ctx, t, c, replicas, v1.DefaultSchedulerName, waves)
}

// failoverSchedulerConfig writes the replicas' KubeSchedulerConfiguration:
// gangConfig with the cluster's kubeconfig and leader election on, with the
// failover test's lease timing.
func failoverSchedulerConfig(t *testing.T, c *testcluster.Cluster) string {
	return writeGangConfig(t, c, map[string]any{
		"leaderElect":       true,
		"resourceLock":      "leases",
		"resourceNamespace": "kube-system",
		"resourceName":      "gpusched",
		"leaseDuration":     failoverLeaseDuration.String(),
		"renewDeadline":     failoverRenewDeadline.String(),
		"retryPeriod":       failoverRetryPeriod.String(),
	})
}

// writeGangConfig writes gangConfig, with the cluster's kubeconfig and, when
// leaderElection is not nil, that leaderElection section, to a file for the
// gpusched binary and returns its path.
func writeGangConfig(t *testing.T, c *testcluster.Cluster, leaderElection map[string]any) string {
	t.Helper()
	doc, err := schedconfig.Parse([]byte(gangConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.SetKubeconfig(c.KubeconfigPath); err != nil {
		t.Fatal(err)
	}
	if leaderElection != nil {
		doc["leaderElection"] = leaderElection
	}
	raw, err := doc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpusched-config.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitForFlag waits until flag is set or ctx ends.
func waitForFlag(ctx context.Context, flag *atomic.Bool) error {
	return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return flag.Load(), nil
	})
}

// waitForReadyz waits until http://addr/readyz answers 200 or ctx ends.
func waitForReadyz(ctx context.Context, addr string) error {
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// TestFailoverGPUCheck shows that the failover tests' GPU check fails when
// it should: on a node of 2 GPUs, pods bound directly (no scheduler runs)
// with assignments that give GPU 0 to a whole-GPU pod and to a 500
// milli-GPU share (1000 + 500 = 1500 > 1000), two 600 milli-GPU shares on
// GPU 1 (1200 > 1000), GPU 2 the node does not have, GPUs of another node,
// and no assignment at all. Each is reported, naming the GPU and its pods.
func TestFailoverGPUCheck(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("gpu-0").GFD(a100, 2, 81920).Obj())
	bound := func(name string) *gt.PodWrapper { return gt.MakeGPUPod(name).Node("gpu-0") }
	on := func(milli int64, devices ...int) gpu.Assignment {
		return gpu.Assignment{Node: "gpu-0", Devices: devices, Milli: milli}
	}
	for _, pod := range []*v1.Pod{
		bound("whole").GPUs(1).Assigned(on(1000, 0)).Obj(),
		bound("share").Milli(500).Assigned(on(500, 0)).Obj(),
		bound("share-a").Milli(600).Assigned(on(600, 1)).Obj(),
		bound("share-b").Milli(600).Assigned(on(600, 1)).Obj(),
		bound("beyond").GPUs(1).Assigned(on(1000, 2)).Obj(),
		bound("elsewhere").GPUs(1).Assigned(gpu.Assignment{Node: "gpu-9", Devices: []int{0}, Milli: 1000}).Obj(),
		bound("unassigned").GPUs(1).Obj(),
	} {
		createPod(ctx, t, c, pod)
	}

	checked, problems := checkGPUAllocations(ctx, c)
	want := []string{
		"GPU gpu-0/0 allocated 1500 milli-GPU, more than 1000: share (500 milli), whole (1000 milli)",
		"GPU gpu-0/1 allocated 1200 milli-GPU, more than 1000: share-a (600 milli), share-b (600 milli)",
		"pod beyond is assigned GPU 2 of gpu-0, which has 2",
		"pod elsewhere is bound to gpu-0 but assigned GPUs of gpu-9",
		"pod unassigned is bound to gpu-0 without a GPU assignment",
	}
	if checked != 7 || !slices.Equal(problems, want) {
		t.Errorf("checked %d pods, want 7; problems:\n%s\nwant:\n%s", checked, strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}
