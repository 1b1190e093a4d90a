package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// loopbackService stands for a Kubernetes Service in front of extender
// replicas: it forwards each request to the next ready endpoint in turn,
// as kube-proxy spreads connections over a Service's ready endpoints. An
// endpoint is ready from its replica's readiness (/readyz) until its
// process exits. With no endpoint ready it answers 503, as a connection to
// a Service without endpoints is refused.
type loopbackService struct {
	server *httptest.Server

	mu        sync.Mutex
	endpoints []string // by slot
	ready     []bool   // by slot
	next      int
}

// endpointKey carries the chosen endpoint in a request's context.
type endpointKey struct{}

// startLoopbackService serves on 127.0.0.1 in front of the endpoints (one
// host:port per slot, none ready yet) until the test ends.
func startLoopbackService(t *testing.T, endpoints []string) *loopbackService {
	s := &loopbackService{endpoints: endpoints, ready: make([]bool, len(endpoints))}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: r.In.Context().Value(endpointKey{}).(string)})
		},
		// An endpoint whose process was just killed: the caller sees the
		// failed connection as a 502, and the scheduler retries.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	s.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		endpoint, ok := s.pick()
		if !ok {
			http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), endpointKey{}, endpoint)))
	}))
	t.Cleanup(s.server.Close)
	return s
}

// addr is the Service's host:port.
func (s *loopbackService) addr() string { return s.server.Listener.Addr().String() }

// setReady marks the endpoint of slot ready or not.
func (s *loopbackService) setReady(slot int, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready[slot] = ready
}

// pick returns the next ready endpoint, round robin.
func (s *loopbackService) pick() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.endpoints {
		slot := s.next
		s.next = (s.next + 1) % len(s.endpoints)
		if s.ready[slot] {
			return s.endpoints[slot], true
		}
	}
	return "", false
}
