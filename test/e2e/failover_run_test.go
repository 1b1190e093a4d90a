package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

const (
	// failoverKillsEnv sets how many times a failover test kills the
	// leader; failoverReportEnv names a file the figures are appended to.
	failoverKillsEnv     = "GPUSCHED_FAILOVER_KILLS"
	failoverReportEnv    = "GPUSCHED_FAILOVER_REPORT"
	defaultFailoverKills = 3

	// The replicas' leader election. A standby takes the Lease once
	// leaseDuration has passed since it last saw it renewed, at its next
	// try (every retryPeriod, stretched by client-go's jitter to up to 2.2
	// retryPeriods): about 5 s after a kill. A leader that cannot renew
	// for renewDeadline stops, so it gets about three tries a second apart
	// before it gives up: enough on two busy cores, where one API call can
	// take a few hundred milliseconds during a burst.
	failoverLeaseDuration = 4 * time.Second
	failoverRenewDeadline = 3 * time.Second
	failoverRetryPeriod   = 1 * time.Second

	// failoverPods is the number of pods of a run of up to ten kills
	// (failoverWaveSize).
	failoverPods = 300

	// Bounds of the waits: a process's start, the Lease's hand-over, the
	// new leader's first bind, and a burst making no progress.
	standbyTimeout = time.Minute
	leaderTimeout  = 30 * time.Second
	firstBindAfter = 30 * time.Second
	burstStall     = time.Minute
)

// failoverKills is $GPUSCHED_FAILOVER_KILLS, or defaultFailoverKills.
func failoverKills(t *testing.T) int {
	t.Helper()
	raw := os.Getenv(failoverKillsEnv)
	if raw == "" {
		return defaultFailoverKills
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		t.Fatalf("invalid $%s %q: want a positive number of kills", failoverKillsEnv, raw)
	}
	return n
}

// failoverWaveSize is the number of pods created before each kill: 300
// pods in all up to ten kills, 30 per kill beyond.
func failoverWaveSize(kills int) int { return max(30, failoverPods/kills) }

// failoverNodes are nodes of 8 A100s, 8 nodes to a rack, 32 nodes (256
// GPUs) for every 300 pods: burstShapes take 65% of them.
func failoverNodes(pods int) []*v1.Node {
	var nodes []*v1.Node
	for i := range (pods*32 + failoverPods - 1) / failoverPods {
		nodes = append(nodes, gt.MakeGPUNode(fmt.Sprintf("gpu-%03d", i)).GFD(a100, 8, 81920).
			Label(rackLabel, fmt.Sprintf("rack-%d", i/8)).Obj())
	}
	return nodes
}

// burstShapes are what the pods of a wave ask for, in turn: per ten pods,
// 4 whole GPUs (two 1-GPU pods and a 2-GPU pod) and 2.5 GPUs in shares.
var burstShapes = []struct {
	gpus  int
	milli int64
}{{1, 0}, {0, 500}, {0, 250}, {1, 0}, {0, 250}, {0, 500}, {2, 0}, {0, 250}, {0, 500}, {0, 250}}

// wavePrefix begins the names of the pods of a wave: "wNN-".
func wavePrefix(wave int) string { return fmt.Sprintf("w%02d-", wave) }

// wavePods are n pods named wavePrefix(wave)+"NNN" in the shapes of
// burstShapes.
func wavePods(wave, n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		shape := burstShapes[i%len(burstShapes)]
		w := gt.MakeGPUPod(fmt.Sprintf("%s%03d", wavePrefix(wave), i))
		if shape.gpus > 0 {
			w.GPUs(shape.gpus)
		} else {
			w.Milli(shape.milli)
		}
		pods[i] = w.Obj()
	}
	return pods
}

// createPods creates the pods with schedulerName from a few goroutines and
// returns a function that waits until all are created and returns the
// errors.
func createPods(ctx context.Context, c *testcluster.Cluster, schedulerName string, pods []*v1.Pod) func() error {
	work := make(chan *v1.Pod)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 8 {
		wg.Go(func() {
			for pod := range work {
				pod = pod.DeepCopy()
				pod.UID = ""
				pod.Spec.SchedulerName = schedulerName
				if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("creating pod %s: %w", pod.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	go func() {
		defer close(work)
		for _, pod := range pods {
			work <- pod
		}
	}()
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// ensureNamespace creates the namespace unless it exists (the API server
// creates kube-system itself, shortly after it starts).
func ensureNamespace(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// failoverSample is what one kill of the leader measured.
type failoverSample struct {
	killed, successor string
	boundAtKill       int // pods of the kill's wave bound when the leader was killed
	toLease, toBind   time.Duration
}

// runFailover kills the leader of replicas once per wave of pods (all
// pods of a wave share a name prefix). For each wave it waits for a warm
// standby, creates the wave's pods (with schedulerName) and, once a random
// number of them, up to half, has been bound, kills the leader; it then
// waits for another replica to take the Lease and for the next bind, and
// checks every bound pod's GPUs. So every kill falls in a burst with pods
// left to bind, however fast the replicas bind; the next wave does not
// wait for the last pods of the previous one. At the end every pod must be
// bound, with no GPU allocated beyond its capacity. It reports the time
// from each kill to the new leader's first bind.
func runFailover(ctx context.Context, t *testing.T, c *testcluster.Cluster, replicas *replicaSet, schedulerName string, waves [][]*v1.Pod) {
	t.Helper()
	binds := watchBinds(ctx, t, c)
	leader, _ := replicas.waitForLeader(ctx, nil, leaderTimeout)

	var samples []failoverSample
	var creating []func() error
	pods := 0
	for i, wave := range waves {
		prefix := wavePrefix(i)
		replicas.waitForWarmStandby(ctx, leader, standbyTimeout)
		creating = append(creating, createPods(ctx, c, schedulerName, wave))
		pods += len(wave)
		binds.waitForCount(ctx, t, c, prefix, 1+rand.IntN(len(wave)/2), burstStall)

		s := failoverSample{killed: leader.name, boundAtKill: binds.count(prefix)}
		killedAt := replicas.kill(leader)
		successor, leadAt := replicas.waitForLeader(ctx, leader, leaderTimeout)
		boundAt := binds.waitForBindAfter(ctx, t, c, leadAt, firstBindAfter)
		s.successor, s.toLease, s.toBind = successor.name, leadAt.Sub(killedAt), boundAt.Sub(killedAt)
		t.Logf("kill %d: %s killed with %d of its wave's %d pods bound; %s took the Lease %v later, next bind %v after the kill",
			i+1, s.killed, s.boundAtKill, len(wave), s.successor, s.toLease.Round(time.Millisecond), s.toBind.Round(time.Millisecond))
		assertGPUsWithinCapacity(ctx, t, c, fmt.Sprintf("after kill %d", i+1))
		leader = successor
		if s.toLease < 0 {
			// The killed replica had lost the Lease on its own just before:
			// this kill measured nothing.
			t.Logf("kill %d not counted: %s held the Lease before %s was killed", i+1, s.successor, s.killed)
			continue
		}
		samples = append(samples, s)
	}

	for _, created := range creating {
		if err := created(); err != nil {
			t.Fatal(err)
		}
	}
	binds.waitForCount(ctx, t, c, "", pods, burstStall)
	assertGPUsWithinCapacity(ctx, t, c, "all pods bound")
	reportFailover(t, samples, pods, replicas.unexpectedExits())
}

// reportFailover logs the median and the maximum of the samples' times
// and appends the line to $GPUSCHED_FAILOVER_REPORT when it is set.
func reportFailover(t *testing.T, samples []failoverSample, pods, unexpectedExits int) {
	t.Helper()
	if len(samples) == 0 {
		t.Fatal("no kill measured a failover")
	}
	var toBind, toLease []time.Duration
	for _, s := range samples {
		toBind, toLease = append(toBind, s.toBind), append(toLease, s.toLease)
	}
	line := fmt.Sprintf("%s: %d kills, %d pods: kill to next bind median %v, max %v; kill to new Lease holder median %v, max %v; %d replicas exited on their own",
		t.Name(), len(samples), pods, median(toBind), slices.Max(toBind).Round(time.Millisecond), median(toLease), slices.Max(toLease).Round(time.Millisecond), unexpectedExits)
	t.Log(line)
	path := os.Getenv(failoverReportEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("$%s: %v", failoverReportEnv, err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Fatalf("$%s: %v", failoverReportEnv, err)
	}
}

// median is the middle of ds (the mean of the two middle values for an
// even count), rounded to the millisecond.
func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	n := len(sorted)
	m := sorted[n/2]
	if n%2 == 0 {
		m = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return m.Round(time.Millisecond)
}
