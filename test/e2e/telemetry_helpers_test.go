package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/legacyregistry"
)

// dcgmExporter serves DCGM exporter metrics in the Prometheus text format on
// a loopback port, with values the test changes while it runs.
type dcgmExporter struct {
	srv *httptest.Server
	mu  sync.Mutex
	// series maps a series' text (name and labels) to its value.
	series map[string]string
}

// dcgmGPU identifies one exported GPU: its node, the label naming the node
// ("Hostname" or "hostname"), its index and UUID.
type dcgmGPU struct {
	node, hostLabel string
	index           int
	uuid, model     string
}

func (g dcgmGPU) labels() string {
	return fmt.Sprintf(`gpu="%d",UUID="%s",device="nvidia%d",modelName="%s",%s="%s"`, g.index, g.uuid, g.index, g.model, g.hostLabel, g.node)
}

func startDCGMExporter(t *testing.T) *dcgmExporter {
	t.Helper()
	e := &dcgmExporter{series: map[string]string{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		lines := make([]string, 0, len(e.series))
		for s, v := range e.series {
			lines = append(lines, s+" "+v)
		}
		e.mu.Unlock()
		sort.Strings(lines)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// set exports value for metric of gpu.
func (e *dcgmExporter) set(metric string, g dcgmGPU, value string) {
	e.setRaw(metric+"{"+g.labels()+"}", value)
}

// setRaw exports a series given as text, malformed ones included.
func (e *dcgmExporter) setRaw(series, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.series[series] = value
}

func (e *dcgmExporter) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// prometheusServer is a real Prometheus process scraping the exporter.
type prometheusServer struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startPrometheus runs Debian's prometheus on a free loopback port, with its
// own configuration and data directory, scraping target every second. It
// fails the test when prometheus is missing and CI is set, else skips.
func startPrometheus(t *testing.T, target string) *prometheusServer {
	t.Helper()
	bin := findTool(t, "prometheus", "PROMETHEUS", "apt-get install -y --no-install-recommends prometheus")
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: dcgm
  static_configs:
  - targets: ['%s']
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	p := &prometheusServer{url: "http://" + addr, done: make(chan struct{}), log: filepath.Join(dir, "prometheus.log")}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop kills the Prometheus process and waits for it to exit.
func (p *prometheusServer) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// query runs an instant query and returns each result's labels and value.
func (p *prometheusServer) query(ctx context.Context, q string) ([]map[string]string, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, nil, err
	}
	var labels []map[string]string
	var values []string
	for _, r := range body.Data.Result {
		labels = append(labels, r.Metric)
		values = append(values, fmt.Sprint(r.Value[1]))
	}
	return labels, values, nil
}

// waitForValue polls Prometheus until q returns exactly one sample equal to want.
func (p *prometheusServer) waitForValue(ctx context.Context, t *testing.T, q, want string) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, values, err := p.query(ctx, q)
		if err != nil {
			return false, nil
		}
		last = values
		return len(values) == 1 && values[0] == want, nil
	})
	if err != nil {
		logs, _ := os.ReadFile(p.log)
		t.Fatalf("prometheus: %s did not become %s within 60s (last %v); prometheus log:\n%s", q, want, last, logs)
	}
}

// delayingProxy forwards to a backend on a loopback port, each request held
// for a delay the test sets; a request whose client gives up is dropped.
type delayingProxy struct {
	srv   *httptest.Server
	delay atomic.Int64 // nanoseconds
}

func startDelayingProxy(t *testing.T, backend string) *delayingProxy {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	p := &delayingProxy{}
	forward := httputil.NewSingleHostReverseProxy(u)
	forward.ErrorLog = log.New(io.Discard, "", 0) // refused and cancelled requests are the point
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Duration(p.delay.Load())):
		case <-r.Context().Done():
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// metricFamily gathers one metric family from the process's legacy registry,
// which the in-process scheduler records into.
func metricFamily(t *testing.T, name string) *dto.MetricFamily {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// metricValue is the value of a gauge or counter without labels; 0 when absent.
func metricValue(t *testing.T, name string) float64 {
	t.Helper()
	f := metricFamily(t, name)
	if f == nil || len(f.Metric) == 0 {
		return 0
	}
	m := f.Metric[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// histogramCounts returns a histogram's observation count and how many were
// at most le seconds.
func histogramCounts(t *testing.T, name string, le float64) (total, below uint64) {
	t.Helper()
	f := metricFamily(t, name)
	if f == nil || len(f.Metric) == 0 || f.Metric[0].Histogram == nil {
		return 0, 0
	}
	h := f.Metric[0].Histogram
	for _, b := range h.Bucket {
		if b.GetUpperBound() == le {
			below = b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount(), below
}

// waitForMetric polls until cond holds for the metric's value.
func waitForMetric(ctx context.Context, t *testing.T, name string, what string, cond func(float64) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return cond(metricValue(t, name)), nil
	})
	if err != nil {
		t.Fatalf("metric %s: not %s within 60s (now %v)", name, what, metricValue(t, name))
	}
}

// waitForRefreshes waits until the plugin has read Prometheus n more times,
// so its snapshot holds what Prometheus held when the wait began.
func waitForRefreshes(ctx context.Context, t *testing.T, n float64) {
	t.Helper()
	start := metricValue(t, "gpusched_telemetry_refreshes_total")
	waitForMetric(ctx, t, "gpusched_telemetry_refreshes_total", fmt.Sprintf("at least %v", start+n), func(v float64) bool { return v >= start+n })
}

// hasLabel reports whether a metric of the family has the label with value.
func hasLabel(f *dto.MetricFamily, name, value string) bool {
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == name && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}
