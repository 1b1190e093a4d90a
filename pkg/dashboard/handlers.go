package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the dashboard, read-only (GET and HEAD; anything else is
// 405):
//
//	/               the page (self-contained HTML: no external assets)
//	/api/snapshot   the current snapshot as Wire JSON (?full=1: gpuview's
//	                Snapshot, with every holder); ETag is the version
//	/api/node       ?name=N: one node of the snapshot with its holders
//	/api/history    the fragmentation and allocation samples (?after=SEQ)
//	/api/explain    ?pod=NAMESPACE/NAME: why the pod waits and what would
//	                let it run (gpuview.Explanation, as kubectl gpusched
//	                explain computes it), against the current snapshot
//	/api/events     Server-Sent Events: "snapshot" {"version":N} at each new
//	                snapshot, "sample" (a Sample) at each new sample,
//	                "rebuild" {"error":...} when a rebuild failed ("" once
//	                one succeeds again)
//	/metrics        Prometheus metrics (Collector, and the process's)
//	/healthz        200 once a snapshot is published, 503 before
//
// The page uses relative URLs, so it works under a path prefix such as the
// API server's service proxy.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.HandleFunc("GET /api/snapshot", s.serveSnapshot)
	mux.HandleFunc("GET /api/node", s.serveNode)
	mux.HandleFunc("GET /api/history", s.serveHistory)
	mux.HandleFunc("GET /api/explain", s.serveExplain)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", s.serveHealth)
	return mux
}

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	// The page loads nothing from elsewhere; say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	w.Write(page)
}

func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("full") != "" {
		snap, _ := s.state.Current()
		if snap == nil {
			writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the informers have not synced")
			return
		}
		writeJSON(w, snap)
		return
	}
	body, gz, version, err := s.state.encoded()
	switch {
	case err != nil:
		writeError(w, http.StatusInternalServerError, "encoding the snapshot: "+err.Error())
		return
	case body == nil:
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the informers have not synced")
		return
	}
	etag := `"` + strconv.FormatUint(version, 10) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Vary", "Accept-Encoding")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		body = gz
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

func (s *Server) serveNode(w http.ResponseWriter, r *http.Request) {
	snap, _ := s.state.Current()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the informers have not synced")
		return
	}
	name := r.URL.Query().Get("name")
	n, ok := snap.Node(name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no GPU node %q in the snapshot", name))
		return
	}
	writeJSON(w, n)
}

func (s *Server) serveExplain(w http.ResponseWriter, r *http.Request) {
	snap, _ := s.state.Current()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the informers have not synced")
		return
	}
	key := r.URL.Query().Get("pod")
	namespace, name, ok := strings.Cut(key, "/")
	if !ok || namespace == "" || name == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("pod: %q is not NAMESPACE/NAME", key))
		return
	}
	e, found := snap.ExplainPod(namespace, name, nil)
	if !found {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no pod %s in the snapshot", key))
		return
	}
	writeJSON(w, e)
}

func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	h := s.state.History(after)
	if h == nil {
		h = []Sample{}
	}
	writeJSON(w, h)
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if _, v := s.state.Current(); v == 0 {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the informers have not synced")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// serveEvents streams changes as Server-Sent Events until the client goes
// away. A client that falls behind gets only the latest version: versions
// in between are skipped, never queued.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()

	var sentVersion, sentSeq uint64
	if h := s.state.History(0); len(h) > 0 { // the page reads the history itself
		sentSeq = h[len(h)-1].Seq
	}
	sentError := ""
	keepAlive := time.NewTicker(s.opts.KeepAlive)
	defer keepAlive.Stop()
	for {
		changed := s.state.Changed()
		if _, v := s.state.Current(); v != sentVersion {
			writeEvent(w, "snapshot", map[string]uint64{"version": v})
			sentVersion = v
		}
		for _, smp := range s.state.History(sentSeq) {
			writeEvent(w, "sample", smp)
			sentSeq = smp.Seq
		}
		if e := s.state.LastError(); e != sentError {
			writeEvent(w, "rebuild", map[string]string{"error": e})
			sentError = e
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		}
	}
}

func writeEvent(w http.ResponseWriter, event string, data any) {
	raw, _ := json.Marshal(data)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, raw)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
