package playground

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpusched/gpusched/internal/chromiumtest"
	"github.com/gpusched/gpusched/pkg/dashboard"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// updateScreenshots writes the dashboard's screenshot to docs/images too.
var updateScreenshots = flag.Bool("update-screenshots", false, "write the dashboard screenshot to docs/images/dashboard.png")

// TestDashboardShowsThePlayground serves the playground, places the demo's
// pods and one whose GPU request is malformed, adds a node whose GPU
// annotation is malformed, serves the dashboard against the playground's
// kubeconfig, and has headless Chromium render the page: it must show the 6
// GPU nodes, the pod that cannot fit with the scheduler's reason, and the
// malformed pod and node each with the error naming its annotation. The
// screenshot is kept in $GPUSCHED_ARTIFACTS (else the test's temporary
// directory); -update-screenshots also writes docs/images/dashboard.png.
func TestDashboardShowsThePlayground(t *testing.T) {
	chromium := chromiumtest.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := serve(ctx, t, nil)
	opts, config, client := pg.opts, pg.config, pg.client

	broken := gt.MakeGPUNode("broken-gpus").Annotation(gpu.AnnotationDevices, "[{not json").AllocatableGPUs(8).Obj()
	if _, err := client.CoreV1().Nodes().Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the node %s: %v", broken.Name, err)
	}
	bad := annotate(demoPod("bad-request"), gpu.AnnotationMilli, "lots")
	bad.Spec.SchedulerName = "gpusched"
	for _, p := range append(DemoPods(opts.Shapes, "gpusched"), bad) {
		if _, err := client.CoreV1().Pods(DemoNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", p.Name, err)
		}
	}

	// The dashboard, as `gpusched dashboard --kubeconfig` runs it, on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	board := dashboard.New(kubernetes.NewForConfigOrDie(config), dashboard.Options{MinInterval: 100 * time.Millisecond})
	boardCtx, stopBoard := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- board.Serve(boardCtx, ln) }()
	t.Cleanup(func() {
		stopBoard()
		if err := <-served; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	base := "http://" + ln.Addr().String() + "/"

	// Wait until the dashboard sees the demo placed: too-big turned down for
	// too few GPUs, bad-request shown invalid, and the placed pods' GPUs
	// allocated: train-full-node 8000m + finetune 2000m + notebooks 3×250m
	// + inference 500m = 11250m at least (batch-job may have finished).
	var snap dashboard.Wire
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(base + "api/snapshot")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&snap) != nil {
			return false, nil
		}
		classes := map[string]string{}
		for _, p := range snap.Pending {
			classes[p.Name] = p.Class
		}
		return classes["too-big"] == "too-few-gpus-on-node" && classes["bad-request"] == dashboard.ClassInvalidRequest &&
			snap.Cluster.AllocatedMilli >= 11250 && snap.Cluster.InvalidNodes == 1, nil
	})
	if err != nil {
		t.Fatalf("the dashboard never showed the demo placed: %v; last snapshot: %+v pending %+v", err, snap.Cluster, snap.Pending)
	}

	dom := chromiumtest.Run(ctx, t, chromium, "--virtual-time-budget=10000", "--dump-dom", base+"?live=0")
	if m := regexp.MustCompile(`<body[^>]*data-state="([^"]*)"`).FindStringSubmatch(dom); m == nil || m[1] != "ready" {
		t.Fatalf("the page did not render a snapshot (body state %v):\n%.3000s", m, dom)
	}
	want := []string{
		`id="node-count" data-nodes="6">6<`, // the 5 simulated nodes and broken-gpus
		`id="gpu-count" data-gpus="32">32<`, // 2×8 A100 + 8 H100 + 2×4 T4; broken-gpus' cannot be read
		`id="gpu-map" width=`, `data-drawn-nodes="6"`,
	}
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("the page has no %s", w)
		}
	}
	row := regexp.MustCompile(`<tr data-pod="default/too-big" data-class="too-few-gpus-on-node">.*?</tr>`).FindString(dom)
	if !strings.Contains(row, ">too-big<") || !strings.Contains(row, "too few GPUs on node") {
		t.Errorf("the pending list shows too-big as %q, want its name and the scheduler's reason", row)
	}
	row = regexp.MustCompile(`<tr data-pod="default/bad-request" data-class="invalid-request">.*?</tr>`).FindString(dom)
	if !strings.Contains(row, `class="err"`) || !strings.Contains(row, gpu.AnnotationMilli) || !strings.Contains(row, "lots") {
		t.Errorf("the pending list shows bad-request as %q, want the error naming %s and its value", row, gpu.AnnotationMilli)
	}
	item := regexp.MustCompile(`<li data-node="broken-gpus">[^<]*</li>`).FindString(dom)
	if !strings.Contains(item, gpu.AnnotationDevices) {
		t.Errorf("the page lists broken-gpus as %q, want the error naming %s", item, gpu.AnnotationDevices)
	}
	if m := regexp.MustCompile(`<body[^>]* data-error="([^"]*)"`).FindStringSubmatch(dom); m != nil {
		t.Errorf("the page's script failed: %s", m[1])
	}
	if m := regexp.MustCompile(`id="banner"[^>]*>([^<]+)<`).FindStringSubmatch(dom); m != nil {
		t.Errorf("the page shows an error: %s", m[1])
	}

	// A filter given in the URL: the A100 model draws its 2 nodes only.
	a100 := ""
	for _, m := range snap.Models {
		if strings.Contains(m, "A100") {
			a100 = m
		}
	}
	dom = chromiumtest.Run(ctx, t, chromium, "--virtual-time-budget=10000", "--dump-dom", base+"?live=0&model="+url.QueryEscape(a100))
	if !strings.Contains(dom, `data-drawn-nodes="2"`) || !strings.Contains(dom, ">2 of 6 nodes shown<") {
		t.Errorf("filtered by model %q, the map does not draw 2 of 6 nodes:\n%.3000s", a100, dom)
	}

	dir := os.Getenv("GPUSCHED_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "dashboard.png")
	chromiumtest.Run(ctx, t, chromium, "--virtual-time-budget=10000", "--screenshot="+shot, "--window-size=1500,760", base+"?live=0")
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if *updateScreenshots {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "images", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A pod's explanation, opened from the URL as a click on its row opens it.
	dom = chromiumtest.Run(ctx, t, chromium, "--virtual-time-budget=10000", "--dump-dom", base+"?live=0&explain=default/too-big")
	if !strings.Contains(dom, `data-verdict="fits nowhere in this cluster: no schedulable node has 9 suitable GPUs`) {
		t.Errorf("?explain=default/too-big shows no verdict for too-big:\n%.3000s", dom)
	}
	shot = filepath.Join(dir, "dashboard-explain.png")
	chromiumtest.Run(ctx, t, chromium, "--virtual-time-budget=10000", "--screenshot="+shot, "--window-size=1500,760", base+"?live=0&explain=default/too-big")
	if png, err = os.ReadFile(shot); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	if *updateScreenshots {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "images", "dashboard-explain.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Live: the page follows the dashboard's event stream, so a pod created
	// while it is open shows up without a reload, in a newer snapshot.
	page := openPage(ctx, t, chromium, base)
	page.waitFor(ctx, t, `document.body.dataset.state === 'ready' && document.getElementById('status').dataset.live === 'true'`, 30*time.Second)
	var before string
	page.eval(t, "document.body.dataset.version", &before)
	late := wholeGPUs(demoPod("late-arrival"), 9)
	late.Spec.SchedulerName = "gpusched"
	if _, err := client.CoreV1().Pods(DemoNamespace).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	page.waitFor(ctx, t, `!!document.querySelector('tr[data-pod="default/late-arrival"]')`, time.Minute)
	var after string
	page.eval(t, "document.body.dataset.version", &after)
	b, _ := strconv.Atoi(before)
	if a, err := strconv.Atoi(after); err != nil || a <= b {
		t.Errorf("the page shows late-arrival in snapshot %q, not newer than %q", after, before)
	}
	var pending, scriptError string
	page.eval(t, "document.body.dataset.error || ''", &scriptError)
	if scriptError != "" {
		t.Errorf("the page's script failed while live: %s", scriptError)
	}
	page.eval(t, "document.getElementById('pending-count').dataset.pending", &pending)
	if pending != "3" {
		t.Errorf("the page counts %s pending GPU pods after late-arrival, want 3", pending)
	}

	// A click on a pending pod explains it, as kubectl gpusched explain
	// does: too-big asks for one GPU more than the largest node has.
	var clicked bool
	page.eval(t, `(() => { const r = document.querySelector('tr[data-pod="default/too-big"]'); if (r) r.click(); return !!r; })()`, &clicked)
	if !clicked {
		t.Fatal("no row for too-big to click")
	}
	page.waitFor(ctx, t, `!!document.querySelector('#details-body [data-verdict]')`, 30*time.Second)
	var verdict string
	page.eval(t, `document.querySelector('#details-body [data-verdict]').dataset.verdict`, &verdict)
	if !strings.Contains(verdict, "fits nowhere in this cluster: no schedulable node has 9 suitable GPUs (the most on one node is 8)") {
		t.Errorf("too-big explained as %q, want fits nowhere: no node has 9 GPUs", verdict)
	}
}
