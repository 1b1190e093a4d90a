package extender

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestHTTPErrors(t *testing.T) {
	te := newTestExtender(t, nil, []*v1.Node{gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Obj()}, nil)
	small := NewHandler(te.ext, 64, nil)
	for _, tc := range []struct {
		name     string
		handler  http.Handler
		method   string
		path     string
		body     string
		wantCode int
		wantBody string // a part of the answer
	}{
		{"malformed JSON gets the decoder's reason", te.handler, "POST", "/filter", `{"Pod": {`, 400, "malformed JSON: unexpected EOF"},
		{"a syntax error", te.handler, "POST", "/prioritize", `{"Pod": nul}`, 400, "malformed JSON: invalid character"},
		{"a wrong type", te.handler, "POST", "/filter", `{"NodeNames": "a100-0"}`, 400, "malformed JSON: json: cannot unmarshal string"},
		{"an empty body", te.handler, "POST", "/bind", ``, 400, "malformed JSON: EOF"},
		{"data after the request", te.handler, "POST", "/filter", `{"Pod": {}, "NodeNames": []} {}`, 400, "malformed JSON: more than one JSON value"},
		{"garbage after the request", te.handler, "POST", "/filter", `{"Pod": {}, "NodeNames": []} x`, 400, "malformed JSON: invalid character 'x'"},
		{"no pod", te.handler, "POST", "/filter", `{"NodeNames": ["a100-0"]}`, 400, "invalid filter request: no Pod"},
		{"no nodes", te.handler, "POST", "/prioritize", `{"Pod": {}}`, 400, "invalid prioritize request: neither NodeNames nor Nodes"},
		{"null", te.handler, "POST", "/preempt", `null`, 400, "invalid preempt request: no Pod"},
		{"a bind without UID", te.handler, "POST", "/bind", `{"PodName": "p", "PodNamespace": "default", "Node": "a100-0"}`, 400, "invalid bind request: no PodUID"},
		{"over the body limit", small, "POST", "/filter", `{"Pod": {"metadata": {"name": "` + strings.Repeat("x", 100) + `"}}, "NodeNames": []}`, 413, "request body exceeds the limit of 64 bytes"},
		{"within the body limit", small, "POST", "/filter", `{"Pod": {}, "NodeNames": ["a100-0"]}`, 200, `"NodeNames":["a100-0"]`},
		{"GET on a verb", te.handler, "GET", "/filter", ``, 405, "Method Not Allowed"},
		{"an unknown verb", te.handler, "POST", "/unknown", `{}`, 404, "not found"},
		{"healthz", te.handler, "GET", "/healthz", ``, 200, "ok"},
		{"readyz once synced", te.handler, "GET", "/readyz", ``, 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.handler.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("HTTP %d %q, want %d with %q", rec.Code, rec.Body, tc.wantCode, tc.wantBody)
			}
			if tc.wantCode == 405 && rec.Header().Get("Allow") != "POST" {
				t.Errorf("405 without Allow: POST: %v", rec.Header())
			}
		})
	}
}

func TestReadyzBeforeSync(t *testing.T) {
	c := newCluster()
	c.synced = append(c.synced, func() bool { return false })
	rec := httptest.NewRecorder()
	NewHandler(New(c, nil, nil), 64, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "informers not synced") {
		t.Errorf("HTTP %d %q, want 503", rec.Code, rec.Body)
	}
}

func TestMetrics(t *testing.T) {
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Obj()}, []*v1.Pod{pod})
	post(t, te.handler, VerbFilter, namesArgs(pod, "a100-0"))
	post(t, te.handler, VerbFilter, `{`)
	post(t, te.handler, VerbBind, bindArgs(pod, "a100-0"))
	post(t, te.handler, VerbBind, bindArgs(pod, "a100-0")) // the retry

	rec := httptest.NewRecorder()
	te.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`gpusched_extender_requests_total{code="200",verb="filter"} 1`,
		`gpusched_extender_requests_total{code="400",verb="filter"} 1`,
		`gpusched_extender_requests_total{code="200",verb="bind"} 2`,
		`gpusched_extender_request_duration_seconds_count{verb="filter"} 2`,
		`gpusched_extender_binds_total{result="bound"} 1`,
		`gpusched_extender_binds_total{result="already-bound"} 1`,
		`gpusched_extender_binder 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
