package dashboard

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// get fetches path from srv and returns the response and its body.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	// A plain transport: the test reads gzip itself.
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestDashboardHandlers(t *testing.T) {
	s := New(nil, Options{PerGPUMetrics: true})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	// Before the first snapshot: not healthy, no snapshot, but the page loads.
	if resp, _ := get(t, srv, "/healthz"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz before a snapshot: %d, want 503", resp.StatusCode)
	}
	if resp, _ := get(t, srv, "/api/snapshot"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/api/snapshot before a snapshot: %d, want 503", resp.StatusCode)
	}

	nodes, pods := fixture()
	s.Publish(nodes, pods)

	resp, page := get(t, srv, "/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, marker := range []string{"/*STYLE*/", "/*SCRIPT*/"} {
		if strings.Contains(string(page), marker) {
			t.Errorf("the page still has its %s marker: style or script not inlined", marker)
		}
	}
	if regexp.MustCompile(`(?i)(src|href)=["']?(https?:)?//`).Match(page) || strings.Contains(string(page), "fetch('/") {
		t.Error("the page refers to an absolute or external URL; it must load only its own API, by relative URL")
	}
	for _, id := range []string{`id="gpu-map"`, `id="node-count"`, `id="pending"`, `id="history"`, `id="filter-model"`, `id="filter-pool"`} {
		if !strings.Contains(string(page), id) {
			t.Errorf("the page has no %s", id)
		}
	}

	if resp, body := get(t, srv, "/healthz"); resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}

	resp, raw := get(t, srv, "/api/snapshot", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("ETag") != `"1"` {
		t.Fatalf("/api/snapshot headers %v, want gzip and ETag \"1\"", resp.Header)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var w Wire
	if err := json.NewDecoder(zr).Decode(&w); err != nil {
		t.Fatal(err)
	}
	// 3 nodes: a100-0, broken and t4-0 (cpu-only has no GPUs); 4 GPUs.
	if w.Version != 1 || w.Cluster.Nodes != 3 || w.Cluster.GPUs != 4 || w.Cluster.InvalidNodes != 1 {
		t.Errorf("snapshot totals %+v (version %d)", w.Cluster, w.Version)
	}
	// 1250 of 4000 milli-GPU allocated: 31.25% -> 31.3 (one decimal); 1000/4000 = 25% fragmented (fixture).
	if w.Cluster.AllocatedPct != 31.3 || w.Cluster.FragmentedPct != 25 {
		t.Errorf("allocated %v%%, fragmented %v%%; want 31.3 and 25", w.Cluster.AllocatedPct, w.Cluster.FragmentedPct)
	}
	if got := names(w.Pending); got != "big bad-milli fresh" {
		t.Errorf("pending in queue order: %q, want big (priority 10), bad-milli (5), fresh (0)", got)
	}
	if p := w.Pending[1]; p.Class != ClassInvalidRequest || !strings.Contains(p.Error, "gpusched.io/gpu-milli") {
		t.Errorf("malformed pod shown as %+v, want its error naming the annotation", p)
	}
	byName := map[string]WireNode{}
	for _, n := range w.Nodes {
		byName[n.Name] = n
	}
	if n := byName["broken"]; n.Error == "" {
		t.Errorf("the broken node shows no inventory error: %+v", n)
	}
	if n := byName["t4-0"]; n.Unhealthy[1] != "XID 79" || w.Pools[n.Pool] != "serve" || w.Models[n.Model] != t4 {
		t.Errorf("t4-0 as %+v (pools %v, models %v)", n, w.Pools, w.Models)
	}
	if n := byName["a100-0"]; n.Alloc[0] != 1000 || n.Alloc[1] != 250 || n.MemAlloc[1] != 10240 || n.Fragmented != 600 {
		t.Errorf("a100-0 as %+v", n)
	}

	if resp, _ := get(t, srv, "/api/snapshot", "If-None-Match", `"1"`); resp.StatusCode != http.StatusNotModified {
		t.Errorf("/api/snapshot with the current ETag: %d, want 304", resp.StatusCode)
	}

	resp, raw = get(t, srv, "/api/snapshot?full=1")
	var full gpuview.Snapshot
	if err := json.Unmarshal(raw, &full); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/snapshot?full=1: %d %v", resp.StatusCode, err)
	}
	if len(full.Nodes) != 3 || len(full.Pending) != 3 || full.Cluster.AllocatedMilli != 1250 {
		t.Errorf("/api/snapshot?full=1: %d nodes, %d pending, %d milli allocated; want 3, 3, 1250",
			len(full.Nodes), len(full.Pending), full.Cluster.AllocatedMilli)
	}

	resp, raw = get(t, srv, "/api/node?name=a100-0")
	var node gpuview.Node
	if err := json.Unmarshal(raw, &node); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/node: %d %v %s", resp.StatusCode, err, raw)
	}
	if len(node.GPUs) != 2 || len(node.GPUs[0].Holders) != 1 || node.GPUs[0].Holders[0].Name != "whole-1" {
		t.Errorf("/api/node holders: %+v", node.GPUs)
	}
	if resp, _ := get(t, srv, "/api/node?name=nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/api/node of an unknown node: %d, want 404", resp.StatusCode)
	}

	resp, raw = get(t, srv, "/metrics")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `gpusched_cluster_gpu_capacity_milli 4000`) {
		t.Errorf("/metrics: %d, no cluster capacity of 4000:\n%.2000s", resp.StatusCode, raw)
	}
	if strings.Contains(string(raw), "whole-1") || strings.Contains(string(raw), "bad-milli") {
		t.Error("/metrics names a pod: pod names must never be labels")
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/snapshot", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/snapshot: %v %v, want 405: the dashboard only reads", resp.StatusCode, err)
	}
}

func names(ps []WirePending) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, " ")
}

// event is one Server-Sent Event.
type event struct{ name, data string }

// readEvents sends the events of an /api/events stream to a channel until
// the stream ends.
func readEvents(body io.Reader) <-chan event {
	ch := make(chan event, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		var e event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			case line == "" && e.name != "":
				ch <- e
				e = event{}
			}
		}
	}()
	return ch
}

// nextSnapshotEvent waits for a "snapshot" event and returns its version.
func nextSnapshotEvent(t *testing.T, events <-chan event, deadline time.Duration) uint64 {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			if e.name != "snapshot" {
				continue
			}
			var v struct{ Version uint64 }
			if err := json.Unmarshal([]byte(e.data), &v); err != nil {
				t.Fatalf("snapshot event %q: %v", e.data, err)
			}
			return v.Version
		case <-timeout:
			t.Fatalf("no snapshot event within %v", deadline)
		}
	}
}

// TestDashboardEventsFollowTheCluster runs the server against a fake
// clientset: the stream announces the first snapshot, then a new one after
// a pending GPU pod is created, and that snapshot lists the pod.
func TestDashboardEventsFollowTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, pods := fixture()
	client := fake.NewClientset()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv, stop := runDashboard(ctx, t, client)
	defer stop()

	streamCtx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	req, _ := http.NewRequestWithContext(streamCtx, http.MethodGet, srv.URL+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("/api/events Content-Type %q", ct)
	}
	events := readEvents(resp.Body)
	first := nextSnapshotEvent(t, events, 30*time.Second)

	pod := gt.MakeGPUPod("late-arrival").GPUs(4).Obj()
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse,
		Message: "0/3 nodes are available: 3 too few GPUs on node."}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Poll the stream until a snapshot with the pod is announced: the pod's
	// arrival may be coalesced with other changes into any later version.
	err = wait.PollUntilContextTimeout(ctx, 0, 30*time.Second, true, func(context.Context) (bool, error) {
		v := nextSnapshotEvent(t, events, 30*time.Second)
		if v <= first {
			t.Fatalf("snapshot version went from %d to %d", first, v)
		}
		_, raw := get(t, srv, "/api/snapshot")
		var w Wire
		if err := json.Unmarshal(raw, &w); err != nil {
			return false, err
		}
		for _, p := range w.Pending {
			if p.Name == "late-arrival" {
				if p.Class != "too-few-gpus-on-node" {
					t.Errorf("late-arrival in class %q, want too-few-gpus-on-node", p.Class)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no snapshot with the new pod was announced: %v", err)
	}
}

// TestDashboardHistory: samples are taken at most once per interval, the
// oldest dropped beyond the history's length.
func TestDashboardHistory(t *testing.T) {
	nodes, pods := fixture()
	snap := gpuview.Build(nodes, pods, gpuview.Options{})
	s := NewState(2, 10*time.Second, 0)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Publish(snap, t0)                     // sample 1
	s.Publish(snap, t0.Add(time.Second))    // within the interval: none
	s.Tick(t0.Add(10 * time.Second))        // sample 2
	s.Tick(t0.Add(15 * time.Second))        // none
	s.Publish(snap, t0.Add(21*time.Second)) // sample 3; sample 1 dropped
	h := s.History(0)
	if len(h) != 2 || h[0].Seq != 2 || h[1].Seq != 3 {
		t.Fatalf("history %+v, want samples 2 and 3", h)
	}
	// 1250/4000 = 31.25% allocated; 1000/4000 = 25% fragmented; 3 pending.
	if h[1].AllocatedPct != 31.25 || h[1].FragmentedPct != 25 || h[1].Pending != 3 {
		t.Errorf("sample %+v", h[1])
	}
	if got := s.History(2); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("History(2) = %+v, want sample 3 only", got)
	}
	if _, v := s.Current(); v != 3 {
		t.Errorf("version %d after 3 publishes", v)
	}
}

// TestDashboardEventsReportAFailedRebuild: a failed rebuild keeps the last
// snapshot and is announced as a "rebuild" event with the error, and its
// end (a new snapshot) as one with no error.
func TestDashboardEventsReportAFailedRebuild(t *testing.T) {
	s := New(nil, Options{})
	nodes, pods := fixture()
	s.Publish(nodes, pods)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	if v := nextSnapshotEvent(t, events, 10*time.Second); v != 1 {
		t.Fatalf("first snapshot event: version %d, want 1", v)
	}

	expect := func(want ...event) {
		t.Helper()
		for _, w := range want {
			select {
			case e := <-events:
				if e != w {
					t.Errorf("event %+v, want %+v", e, w)
				}
			case <-ctx.Done():
				t.Fatalf("no event %+v", w)
			}
		}
	}
	s.State().Failed(errors.New("listing pods: connection refused"))
	expect(event{"rebuild", `{"error":"listing pods: connection refused"}`})
	if _, v := s.State().Current(); v != 1 {
		t.Errorf("version %d after a failed rebuild, want the last snapshot (1) kept", v)
	}
	s.Publish(nodes, pods)
	expect(event{"snapshot", `{"version":2}`}, event{"rebuild", `{"error":""}`})
}

// TestDashboardExplain: /api/explain answers as kubectl gpusched explain.
func TestDashboardExplain(t *testing.T) {
	s := New(nil, Options{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	nodes, pods := fixture()
	s.Publish(nodes, pods)

	resp, raw := get(t, srv, "/api/explain?pod=default/big")
	var e gpuview.Explanation
	if err := json.Unmarshal(raw, &e); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("/api/explain: %d %v %s", resp.StatusCode, err, raw)
	}
	// big asks for 2 GPUs: a100-0's two are held by whole-1 (1000m) and
	// share-1 (250m), both priority 0; t4-0 has one healthy T4 of two.
	want := "nothing fits now; nearest: fits on a100-0 if GPUs 0, 1 are freed — held by pods default/whole-1, default/share-1 (priority 0)"
	if e.Verdict != want {
		t.Errorf("verdict = %q, want %q", e.Verdict, want)
	}
	if e.QueuePosition != 1 || e.QueueLength != 3 {
		t.Errorf("queue %d of %d, want 1 of 3", e.QueuePosition, e.QueueLength)
	}
	for path, code := range map[string]int{
		"/api/explain?pod=big":          http.StatusBadRequest,
		"/api/explain":                  http.StatusBadRequest,
		"/api/explain?pod=default/nope": http.StatusNotFound,
	} {
		if resp, body := get(t, srv, path); resp.StatusCode != code || !strings.Contains(string(body), "error") {
			t.Errorf("%s: %d %s, want %d with an error", path, resp.StatusCode, body, code)
		}
	}
}

// runDashboard runs a dashboard of client, as Run keeps it current, and
// serves it; stop ends both and checks that Run returned no error.
func runDashboard(ctx context.Context, t *testing.T, client kubernetes.Interface) (srv *httptest.Server, stop func()) {
	t.Helper()
	s := New(client, Options{MinInterval: 20 * time.Millisecond, SampleEvery: time.Hour})
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	srv = httptest.NewServer(s.Handler())
	return srv, func() {
		srv.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
