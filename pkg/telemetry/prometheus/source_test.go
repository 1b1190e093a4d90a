package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// fakePrometheus answers the instant-query API with a fixed vector for the
// gauge query and another for the XID query; unit tests only (the e2e test
// runs a real Prometheus).
type fakePrometheus struct {
	srv        *httptest.Server
	delay      atomic.Int64
	fail       atomic.Bool
	authHeader atomic.Value
	queries    atomic.Int64
}

const gaugeResult = `{"status":"success","data":{"resultType":"vector","result":[
 {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","Hostname":"n1","gpu":"0","UUID":"GPU-a"},"value":[100,"42"]},
 {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"1"},"value":[100,"42"]},
 {"metric":{"__name__":"DCGM_FI_DEV_FB_USED","Hostname":"n1","gpu":"0","UUID":"GPU-a"},"value":[100,"NaN"]}]}}`

const xidResult = `{"status":"success","data":{"resultType":"vector","result":[
 {"metric":{"Hostname":"n1","gpu":"0","UUID":"GPU-a"},"value":[100,"79"]}]}}`

func startFakePrometheus(t *testing.T) *fakePrometheus {
	f := &fakePrometheus{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.queries.Add(1)
		f.authHeader.Store(r.Header.Get("Authorization"))
		_ = r.ParseForm() // reads the body, so a client giving up cancels r.Context()
		select {
		case <-time.After(time.Duration(f.delay.Load())):
		case <-r.Context().Done():
			return
		}
		if f.fail.Load() {
			http.Error(w, `{"status":"error","errorType":"internal","error":"boom"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Form.Get("query"), "max_over_time") {
			fmt.Fprint(w, xidResult)
			return
		}
		fmt.Fprint(w, gaugeResult)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func newTestSource(t *testing.T, address string, auth Auth, observe func(time.Duration, *telemetry.Snapshot, error)) *Source {
	t.Helper()
	s, err := New(Config{Address: address, Auth: auth, RefreshInterval: 50 * time.Millisecond,
		QueryTimeout: 200 * time.Millisecond, HealthWindow: 10 * time.Minute, Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRefresh(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := startFakePrometheus(t)
	s := newTestSource(t, f.srv.URL, Auth{}, nil)
	if s.Latest() != nil {
		t.Fatal("a snapshot before the first refresh")
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	first := s.Latest()
	g := first.Node("n1").Lookup("GPU-a", 0)
	if g == nil {
		t.Fatalf("n1 GPU-a missing from %+v", first.Nodes)
	}
	if v, _ := g.Get(telemetry.GPUUtil); v != 42 {
		t.Errorf("utilization %v, want 42", v)
	}
	if v, _ := g.Get(telemetry.XIDErrors); v != 79 {
		t.Errorf("XID %v, want 79", v)
	}
	if _, ok := g.Get(telemetry.FBUsed); ok {
		t.Errorf("a NaN FB_USED was recorded")
	}

	// A failing Prometheus: an error, and the last snapshot stays.
	f.fail.Store(true)
	if err := s.Refresh(ctx); err == nil {
		t.Error("no error from a failing Prometheus")
	}
	if s.Latest() != first {
		t.Error("a failed refresh replaced the snapshot")
	}

	// A slow Prometheus: the refresh gives up at the query timeout.
	f.fail.Store(false)
	f.delay.Store(int64(5 * time.Second))
	err := s.Refresh(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("refresh from a slow Prometheus: %v, want a deadline exceeded error", err)
	}
	if s.Latest() != first {
		t.Error("a timed-out refresh replaced the snapshot")
	}
}

func TestAuth(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	password := filepath.Join(dir, "password")
	for path, content := range map[string]string{token: "s3cret\n", password: "pw\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := startFakePrometheus(t)
	tests := []struct {
		name string
		auth Auth
		want string
	}{
		{"none", Auth{}, ""},
		{"bearer token file", Auth{BearerTokenFile: token}, "Bearer s3cret"},
		{"basic auth", Auth{BasicAuthUsername: "gpusched", BasicAuthPasswordFile: password}, "Basic Z3B1c2NoZWQ6cHc="}, // base64("gpusched:pw")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSource(t, f.srv.URL, tt.auth, nil)
			if err := s.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.authHeader.Load(); got != tt.want {
				t.Errorf("Authorization %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no address", Config{RefreshInterval: time.Second, QueryTimeout: time.Second, HealthWindow: time.Minute}, "prometheus address is empty"},
		{"zero timeout", Config{Address: "http://127.0.0.1:9090", RefreshInterval: time.Second, HealthWindow: time.Minute}, "must all be positive"},
		{"token file missing", Config{Address: "http://127.0.0.1:9090", RefreshInterval: time.Second, QueryTimeout: time.Second,
			HealthWindow: time.Minute, Auth: Auth{BearerTokenFile: missing}}, "reading secret file"},
		{"CA file missing", Config{Address: "https://127.0.0.1:9090", RefreshInterval: time.Second, QueryTimeout: time.Second,
			HealthWindow: time.Minute, Auth: Auth{CAFile: missing}}, "CA file"},
		{"two kinds of auth", Config{Address: "http://127.0.0.1:9090", RefreshInterval: time.Second, QueryTimeout: time.Second,
			HealthWindow: time.Minute, Auth: Auth{BearerTokenFile: missing, BasicAuthUsername: "u"}}, "want at most one"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// TestRunStops: Run refreshes on its interval, reports each refresh, and
// returns once its context is cancelled.
func TestRunStops(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := startFakePrometheus(t)
	var observed atomic.Int64
	s := newTestSource(t, f.srv.URL, Auth{}, func(time.Duration, *telemetry.Snapshot, error) { observed.Add(1) })
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	for observed.Load() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if s.Latest() == nil {
		t.Error("no snapshot after three refreshes")
	}
}
