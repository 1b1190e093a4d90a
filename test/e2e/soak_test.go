//go:build soak

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

const (
	// soakDurationEnv sets how long TestSoak churns (a Go duration,
	// default 30m); soakReportEnv names a file its figures are appended
	// to.
	soakDurationEnv     = "GPUSCHED_SOAK_DURATION"
	soakReportEnv       = "GPUSCHED_SOAK_REPORT"
	soakProfilesEnv     = "GPUSCHED_SOAK_PROFILES"
	defaultSoakDuration = 30 * time.Minute

	// The churn: soakRate pods a second, each deleted soakLifetime after
	// it was created, bound or not; so about soakRate × soakLifetime = 960
	// pods live at once, asking for about 640 of soakNodes × 4 = 1200 GPUs.
	// Every soakGangEvery-th pod slot is a gang of soakGangSize 1-GPU pods
	// with its PodGroup, deleted with its pods.
	soakNodes     = 300
	soakRate      = 8
	soakLifetime  = 2 * time.Minute
	soakGangEvery = 40
	soakGangSize  = 4

	// soakSampleEvery is how often the scheduler's heap and goroutines are
	// sampled.
	soakSampleEvery = 15 * time.Second
)

// TestSoak runs the gpusched binary (built from cmd/gpusched, with
// examples/gpusched-gang-config.yaml) against the in-process API server for
// $GPUSCHED_SOAK_DURATION (30 minutes by default) of steady churn on 300
// nodes of 4 GPUs: 8 pods a second created in burstShapes (1 and 2 whole
// GPUs, 250 and 500 milli-GPU shares) and every 40th slot a gang of four
// 1-GPU pods, each pod deleted two minutes after it was created. The
// nodes are API objects with no kubelet, as kwok's are: the scheduler
// cannot tell the difference.
//
// Every 15 s the test reads the scheduler's heap after a forced garbage
// collection (/debug/pprof/heap?gc=1, the runtime's HeapAlloc) and its
// goroutine count (/debug/pprof/goroutine). After a 12-minute warm-up the
// run is cut into windows of 6 minutes, the period of the scheduler's
// event cache (see warmup). The test fails unless the
// medians of the heap and of the goroutines in the last window are within
// 10% of those in the first, and the p99 time from a pod's creation to its bind in the
// last window is at most twice the first window's plus 200 ms (two busy
// cores jitter). At the end every pod left must be bound within a minute,
// no pod may have been deleted unbound, and no GPU may be allocated beyond
// its capacity.
//
// It is behind the soak build tag, out of the default test command:
//
//	go test -tags soak -count=1 -timeout 60m -run TestSoak -v ./test/e2e/
//
// GPUSCHED_SOAK_DURATION lengthens the run (it must be at least 24m);
// GPUSCHED_SOAK_REPORT=FILE appends the per-window table to FILE;
// GPUSCHED_SOAK_PROFILES=DIR saves the scheduler's heap profiles after the
// warm-up and at the end to DIR.
func TestSoak(t *testing.T) {
	ctx := context.Background()
	duration := soakDuration(t)
	// The population is steady once the first pods are deleted, a lifetime
	// after the start; the heap once the scheduler's event recorder
	// (client-go's events.k8s.io broadcaster) drops what it cached: it keeps
	// every event it recorded (one per bind) for series aggregation and
	// drops those older than 6 minutes every 6 minutes, so it holds 6 to
	// 12 minutes of events, a sawtooth of 6 minutes: the warm-up covers its
	// first fill, and windows of 6 minutes each hold one tooth.
	const warmup, window = 12 * time.Minute, 6 * time.Minute
	if duration < warmup+2*window {
		t.Fatalf("$%s=%v leaves less than two windows of %v after the warm-up of %v: give at least %v", soakDurationEnv, duration, window, warmup, warmup+2*window)
	}

	bin := buildCommand(t, "gpusched")
	c := testcluster.Start(t)
	for i := range soakNodes {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(fmt.Sprintf("gpu-%03d", i)).GFD(a100, 4, 81920).
			Label(rackLabel, fmt.Sprintf("rack-%d", i/8)).Obj())
	}
	dyn := installPodGroupCRD(ctx, t, c)
	sched := startSoakScheduler(ctx, t, bin, writeGangConfig(t, c, nil))
	binds := watchBinds(ctx, t, c)

	samples := make(chan soakSample, 1024)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { sched.sample(sampleCtx, t, samples) })

	churn := newSoakChurn(c)
	start := time.Now()
	tick := time.NewTicker(time.Second / soakRate)
	profiled := false
	for slot := 0; time.Since(start) < duration; slot++ {
		<-tick.C
		if !profiled && time.Since(start) >= warmup {
			sched.saveHeapProfile(ctx, t, "heap-after-warmup.pb.gz")
			profiled = true
		}
		if slot%soakGangEvery == soakGangEvery-1 {
			group := fmt.Sprintf("gang-%05d", slot)
			createPodGroup(ctx, t, dyn, group, soakGangSize, 0)
			for j := range soakGangSize {
				last := "" // the PodGroup goes with its last pod
				if j == soakGangSize-1 {
					last = group
				}
				churn.create(ctx, t, gangPod(fmt.Sprintf("%s-%d", group, j), group, 1), last)
			}
		} else {
			shape := burstShapes[slot%len(burstShapes)]
			w := gt.MakeGPUPod(fmt.Sprintf("pod-%05d", slot))
			if shape.gpus > 0 {
				w.GPUs(shape.gpus)
			} else {
				w.Milli(shape.milli)
			}
			churn.create(ctx, t, w.Obj(), "")
		}
		churn.deleteOlderThan(ctx, t, dyn, soakLifetime, binds)
	}
	tick.Stop()
	stopSampling()
	sampling.Wait()
	close(samples)

	if !sched.alive() {
		t.Fatalf("the scheduler exited during the soak; its log ends:\n%s", sched.logTail(40))
	}
	sched.saveHeapProfile(ctx, t, "heap-at-end.pb.gz")
	binds.waitForCount(ctx, t, c, "", churn.created, time.Minute)
	assertGPUsWithinCapacity(ctx, t, c, "after the soak")

	var all []soakSample
	for s := range samples {
		all = append(all, s)
	}
	report := summarizeSoak(start, duration, warmup, window, all, churn.latencies(binds))
	report.pods, report.deletedUnbound = churn.created, churn.deletedUnbound
	t.Log("\n" + report.String())
	appendSoakReport(t, report)
	for _, problem := range report.problems() {
		t.Error(problem)
	}
}

// soakDuration is $GPUSCHED_SOAK_DURATION, or defaultSoakDuration.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	raw := os.Getenv(soakDurationEnv)
	if raw == "" {
		return defaultSoakDuration
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		t.Fatalf("invalid $%s %q: want a Go duration such as 30m", soakDurationEnv, raw)
	}
	return d
}

// soakScheduler is the gpusched process under soak.
type soakScheduler struct {
	addr    string // its secure port, 127.0.0.1:N
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	client  *http.Client
}

// startSoakScheduler starts bin with config, serving on a loopback port
// where /debug/pprof needs no credentials (--authorization-always-allow-paths:
// the port is reachable only from this machine), and waits until it
// answers /readyz.
func startSoakScheduler(ctx context.Context, t *testing.T, bin, config string) *soakScheduler {
	t.Helper()
	addr := freeLoopbackAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	s := &soakScheduler{
		addr:    addr,
		logPath: filepath.Join(t.TempDir(), "gpusched.log"),
		exited:  make(chan struct{}),
		// The port serves a self-signed certificate for loopback.
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}},
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "--config", config, "--bind-address=127.0.0.1", "--secure-port="+port,
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*")
	dieWithTest(s.cmd)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !s.alive() {
			return false, fmt.Errorf("gpusched exited")
		}
		_, err := s.get(ctx, "/readyz")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("gpusched not ready: %v; its log ends:\n%s", err, s.logTail(40))
	}
	return s
}

func (s *soakScheduler) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// get fetches https://addr/path and returns the body of a 200 answer.
func (s *soakScheduler) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}

// saveHeapProfile writes the scheduler's heap profile, after a forced GC,
// to name in $GPUSCHED_SOAK_PROFILES when that is set: compare two with
// go tool pprof -base heap-after-warmup.pb.gz BIN heap-at-end.pb.gz.
func (s *soakScheduler) saveHeapProfile(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(soakProfilesEnv)
	if dir == "" {
		return
	}
	profile, err := s.get(ctx, "/debug/pprof/heap?gc=1")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), profile, 0o644)
	}
	if err != nil {
		t.Errorf("saving the scheduler's heap profile: %v", err)
	}
}

func (s *soakScheduler) logTail(n int) string {
	raw, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// soakSample is one reading of the scheduler process.
type soakSample struct {
	at         time.Time
	heap       uint64 // bytes allocated on the heap right after a forced GC
	goroutines int
}

var (
	heapAllocLine  = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`)
	goroutinesLine = regexp.MustCompile(`(?m)^goroutine profile: total (\d+)$`)
)

// sample reads the scheduler every soakSampleEvery until ctx ends and
// sends each reading to out; a reading that fails fails the test.
func (s *soakScheduler) sample(ctx context.Context, t *testing.T, out chan<- soakSample) {
	tick := time.NewTicker(soakSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		heap, err := s.get(ctx, "/debug/pprof/heap?gc=1&debug=1")
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("reading the scheduler's heap: %v", err)
			}
			return
		}
		goroutines, err := s.get(ctx, "/debug/pprof/goroutine?debug=1")
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("reading the scheduler's goroutines: %v", err)
			}
			return
		}
		h, errH := matchedInt(heapAllocLine, heap)
		g, errG := matchedInt(goroutinesLine, goroutines)
		if errH != nil || errG != nil {
			t.Errorf("reading the scheduler's profiles: heap: %v; goroutines: %v", errH, errG)
			return
		}
		out <- soakSample{at: time.Now(), heap: uint64(h), goroutines: int(g)}
	}
}

// matchedInt is the number re's first group matches in body.
func matchedInt(re *regexp.Regexp, body []byte) (int64, error) {
	m := re.FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("no line matching %s", re)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// soakChurn creates pods and deletes them in the order they were created.
type soakChurn struct {
	c              *testcluster.Cluster
	live           []soakPod // oldest first
	createdAt      map[string]time.Time
	created        int
	deletedUnbound int
}

type soakPod struct {
	name, group string // group: the PodGroup whose last pod this is, or ""
	at          time.Time
}

func newSoakChurn(c *testcluster.Cluster) *soakChurn {
	return &soakChurn{c: c, createdAt: map[string]time.Time{}}
}

// create creates pod for the gpusched scheduler. group names the pod's
// PodGroup, deleted when the pod is.
func (s *soakChurn) create(ctx context.Context, t *testing.T, pod *v1.Pod, group string) {
	t.Helper()
	pod.Spec.SchedulerName = schedulerName
	at := time.Now()
	if _, err := s.c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	s.live = append(s.live, soakPod{name: pod.Name, group: group, at: at})
	s.createdAt[pod.Name] = at
	s.created++
}

// deleteOlderThan deletes every pod created more than age ago, with no
// grace period (no kubelet would confirm a graceful one), and the PodGroups
// of gang pods among them.
func (s *soakChurn) deleteOlderThan(ctx context.Context, t *testing.T, dyn dynamic.Interface, age time.Duration, binds *bindWatch) {
	t.Helper()
	for len(s.live) > 0 && time.Since(s.live[0].at) > age {
		p := s.live[0]
		s.live = s.live[1:]
		if !binds.isBound(p.name) {
			s.deletedUnbound++
		}
		if err := s.c.Client.CoreV1().Pods("default").Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatalf("deleting pod %s: %v", p.name, err)
		}
		if p.group != "" {
			if err := dyn.Resource(podgroup.Resource).Namespace("default").Delete(ctx, p.group, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting PodGroup %s: %v", p.group, err)
			}
		}
	}
}

// latencies are the times from creation to bind of every pod seen bound,
// keyed by the moment it was created.
func (s *soakChurn) latencies(binds *bindWatch) []soakLatency {
	var out []soakLatency
	for name, created := range s.createdAt {
		if bound, ok := binds.boundAt(name); ok {
			out = append(out, soakLatency{created: created, toBind: bound.Sub(created)})
		}
	}
	return out
}

// isBound reports whether pod has been seen bound.
func (b *bindWatch) isBound(pod string) bool {
	_, ok := b.boundAt(pod)
	return ok
}

// boundAt is when pod was first seen bound.
func (b *bindWatch) boundAt(pod string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.bound[pod]
	return at, ok
}

// soakLatency is one pod's time from creation to bind.
type soakLatency struct {
	created time.Time
	toBind  time.Duration
}

// soakWindow is what one window of the run measured: the medians of the
// samples taken in it and the bind times of the pods created in it.
type soakWindow struct {
	from, to        time.Duration // since the start of the churn
	heap            uint64
	goroutines      int
	samples, pods   int
	p50, p99, worst time.Duration
}

// soakReport is a soak run's figures.
type soakReport struct {
	warmup               time.Duration
	first                soakSample // the first sample, during warm-up
	windows              []soakWindow
	pods, deletedUnbound int
}

// summarizeSoak cuts the run of length duration after warmup into whole
// windows of length window and summarizes each.
func summarizeSoak(start time.Time, duration, warmup, window time.Duration, samples []soakSample, latencies []soakLatency) soakReport {
	r := soakReport{warmup: warmup}
	if len(samples) > 0 {
		r.first = samples[0]
	}
	for from := warmup; from+window <= duration; from += window {
		w := soakWindow{from: from, to: from + window}
		var heaps []uint64
		var goroutines []int
		for _, s := range samples {
			if at := s.at.Sub(start); at >= w.from && at < w.to {
				heaps, goroutines = append(heaps, s.heap), append(goroutines, s.goroutines)
			}
		}
		var binds []time.Duration
		for _, l := range latencies {
			if at := l.created.Sub(start); at >= w.from && at < w.to {
				binds = append(binds, l.toBind)
			}
		}
		w.samples, w.pods = len(heaps), len(binds)
		if len(heaps) > 0 {
			slices.Sort(heaps)
			slices.Sort(goroutines)
			w.heap, w.goroutines = heaps[len(heaps)/2], goroutines[len(goroutines)/2]
		}
		if len(binds) > 0 {
			slices.Sort(binds)
			w.p50, w.p99, w.worst = binds[len(binds)/2], binds[(len(binds)*99)/100], binds[len(binds)-1]
		}
		r.windows = append(r.windows, w)
	}
	return r
}

// problems are the ways the run was not steady: fewer than two windows with
// samples and binds, heap or goroutines of the last window more than 10%
// away from the first's, a last p99 above twice the first's plus 200 ms,
// or pods deleted before they were bound.
func (r soakReport) problems() []string {
	var out []string
	if len(r.windows) < 2 {
		return []string{fmt.Sprintf("%d windows after warm-up, want at least 2", len(r.windows))}
	}
	first, last := r.windows[0], r.windows[len(r.windows)-1]
	for _, w := range []soakWindow{first, last} {
		if w.samples == 0 || w.pods == 0 {
			out = append(out, fmt.Sprintf("window %v-%v has %d samples and %d pods", w.from, w.to, w.samples, w.pods))
		}
	}
	if len(out) > 0 {
		return out
	}
	if d := relativeChange(float64(first.heap), float64(last.heap)); d > 0.10 || d < -0.10 {
		out = append(out, fmt.Sprintf("heap after GC went from %s to %s (%+.1f%%), want within 10%%", mib(first.heap), mib(last.heap), 100*d))
	}
	if d := relativeChange(float64(first.goroutines), float64(last.goroutines)); d > 0.10 || d < -0.10 {
		out = append(out, fmt.Sprintf("goroutines went from %d to %d (%+.1f%%), want within 10%%", first.goroutines, last.goroutines, 100*d))
	}
	if limit := 2*first.p99 + 200*time.Millisecond; last.p99 > limit {
		out = append(out, fmt.Sprintf("p99 creation to bind went from %v to %v, want at most %v", first.p99, last.p99, limit))
	}
	if r.deletedUnbound > 0 {
		out = append(out, fmt.Sprintf("%d pods were deleted before they were bound", r.deletedUnbound))
	}
	return out
}

func relativeChange(from, to float64) float64 { return (to - from) / from }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// String is the report as a Markdown table, one row per window.
func (r soakReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d pods created, %d deleted before bound; first sample (warm-up): heap %s, %d goroutines\n\n",
		r.pods, r.deletedUnbound, mib(r.first.heap), r.first.goroutines)
	b.WriteString("| window | heap after GC (median) | goroutines (median) | pods created | bind p50 | bind p99 | bind max |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, w := range r.windows {
		fmt.Fprintf(&b, "| %v–%v | %s | %d | %d | %v | %v | %v |\n", w.from, w.to.Round(time.Second), mib(w.heap), w.goroutines, w.pods,
			w.p50.Round(time.Millisecond), w.p99.Round(time.Millisecond), w.worst.Round(time.Millisecond))
	}
	return b.String()
}

// appendSoakReport appends the report to $GPUSCHED_SOAK_REPORT when it is
// set.
func appendSoakReport(t *testing.T, r soakReport) {
	t.Helper()
	path := os.Getenv(soakReportEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("$%s: %v", soakReportEnv, err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s (%s)\n\n%s\n", t.Name(), time.Now().UTC().Format(time.DateTime), r); err != nil {
		t.Fatalf("$%s: %v", soakReportEnv, err)
	}
}
