package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The verbs, each served at "/"+verb. The scheduler configuration's
// filterVerb, prioritizeVerb, bindVerb and preemptVerb must name them.
const (
	VerbFilter     = "filter"
	VerbPrioritize = "prioritize"
	VerbBind       = "bind"
	VerbPreempt    = "preempt"
)

// DefaultMaxRequestBytes is the default limit of a request body. A filter
// request that names 5000 nodes (nodeCacheCapable: true) is about 100 KiB;
// one that carries the Node objects takes several KiB per node, so large
// clusters with nodeCacheCapable: false need a higher limit.
const DefaultMaxRequestBytes = 10 << 20

// handler serves the extender API over HTTP.
type handler struct {
	ext             *Extender
	maxRequestBytes int64
	auth            *ClientAuth // nil: no client certificate required
	metrics         *serverMetrics
	requests        atomic.Uint64 // numbers requests in logs
}

// NewHandler returns the extender's HTTP handler:
//
//   - POST /filter, /prioritize, /bind, /preempt: the extender v1 API, JSON
//     in and out. A body over maxRequestBytes gets 413, malformed JSON or a
//     request lacking what the verb needs 400 with the reason, another method
//     405. Decisions are the Extender's; a bind that fails answers 200 with
//     the error in ExtenderBindingResult.Error, as the API wants.
//   - GET /healthz: 200 while the process serves.
//   - GET /readyz: 200 once the informers' initial lists are in the cluster
//     view, else 503.
//   - GET /metrics: Prometheus text format.
//
// With auth, the four API verbs answer 401 to a request without a verified
// client certificate and 403 to one whose certificate names no allowed
// client, before reading the body; health, readiness and metrics stay open.
func NewHandler(ext *Extender, maxRequestBytes int64, auth *ClientAuth) http.Handler {
	h := &handler{ext: ext, maxRequestBytes: maxRequestBytes, auth: auth, metrics: newServerMetrics(ext.mayBind)}
	ext.onBind = h.metrics.bind
	mux := http.NewServeMux()
	mux.Handle("POST /"+VerbFilter, serveVerb(h, VerbFilter, argsCodec, validArgs, ext.Filter))
	mux.Handle("POST /"+VerbPrioritize, serveVerb(h, VerbPrioritize, prioritizeCodec, validArgs, ext.Prioritize))
	mux.Handle("POST /"+VerbBind, serveVerb(h, VerbBind, codec[extenderv1.ExtenderBindingArgs, *extenderv1.ExtenderBindingResult]{}, validBindingArgs, ext.Bind))
	mux.Handle("POST /"+VerbPreempt, serveVerb(h, VerbPreempt, codec[extenderv1.ExtenderPreemptionArgs, *extenderv1.ExtenderPreemptionResult]{}, validPreemptionArgs, ext.Preempt))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ext.cluster.HasSynced() {
			writeText(w, http.StatusServiceUnavailable, "informers not synced")
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	mux.Handle("GET /metrics", h.metrics.handler())
	return mux
}

// codec holds a verb's fast paths around encoding/json (fastjson.go); all
// are optional. decode reports false to leave the request to encoding/json,
// encode to leave the answer to it. release is called once the answer is
// written, to reuse the lists of the request and the answer.
type codec[Req, Resp any] struct {
	decode  func(data []byte, req *Req) bool
	encode  func(dst []byte, resp Resp) ([]byte, bool)
	release func(req *Req, resp Resp)
}

var argsCodec = codec[extenderv1.ExtenderArgs, *extenderv1.ExtenderFilterResult]{
	decode: decodeArgsFast,
	encode: func(dst []byte, r *extenderv1.ExtenderFilterResult) ([]byte, bool) {
		if r.Nodes != nil {
			return dst, false
		}
		return appendFilterResult(dst, r), true
	},
	release: func(req *extenderv1.ExtenderArgs, r *extenderv1.ExtenderFilterResult) {
		if req.NodeNames != nil {
			putNames(*req.NodeNames)
		}
		if r.NodeNames != nil {
			putNames(*r.NodeNames)
		}
	},
}

var prioritizeCodec = codec[extenderv1.ExtenderArgs, extenderv1.HostPriorityList]{
	decode: decodeArgsFast,
	encode: func(dst []byte, l extenderv1.HostPriorityList) ([]byte, bool) {
		return appendHostPriorities(dst, l), true
	},
	release: func(req *extenderv1.ExtenderArgs, l extenderv1.HostPriorityList) {
		if req.NodeNames != nil {
			putNames(*req.NodeNames)
		}
		putPriorities(l)
	},
}

// serveVerb decodes a Req, checks it with valid, answers do's result as JSON
// and records the request's metrics.
func serveVerb[Req, Resp any](h *handler, verb string, c codec[Req, Resp], valid func(*Req) error, do func(context.Context, *Req) Resp) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		logger := klog.FromContext(r.Context()).WithValues("verb", verb, "request", h.requests.Add(1))
		code := func() int {
			if h.auth != nil {
				if err := h.auth.check(r); err != nil {
					code := http.StatusForbidden
					if errors.Is(err, errNoClientCert) {
						code = http.StatusUnauthorized
					}
					logger.V(1).Info("Refused a caller", "code", code, "remote", r.RemoteAddr, "err", err)
					writeText(w, code, err.Error())
					return code
				}
			}
			body := getBuffer()
			defer putBuffer(body)
			req := new(Req)
			code, err := readBody(w, r, h.maxRequestBytes, body)
			if err == nil && (c.decode == nil || !c.decode(body.Bytes(), req)) {
				*req = *new(Req)
				code, err = decode(body.Bytes(), req)
			}
			if err != nil {
				logger.V(2).Info("Rejected request", "code", code, "err", err)
				writeText(w, code, err.Error())
				return code
			}
			if err := valid(req); err != nil {
				logger.V(2).Info("Rejected request", "code", http.StatusBadRequest, "err", err)
				writeText(w, http.StatusBadRequest, fmt.Sprintf("invalid %s request: %v", verb, err))
				return http.StatusBadRequest
			}
			logger = logger.WithValues(requestValues(req)...)
			resp := do(klog.NewContext(r.Context(), logger), req)

			out := answers.Get().(*[]byte)
			var raw []byte
			fast := false
			if c.encode != nil {
				raw, fast = c.encode((*out)[:0], resp)
			}
			if fast && cap(raw) <= maxPooledBuffer {
				defer func() { *out = raw[:0]; answers.Put(out) }()
			}
			if !fast {
				if raw, err = json.Marshal(resp); err != nil {
					logger.Error(err, "Encoding the answer failed")
					writeText(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
					return http.StatusInternalServerError
				}
			}
			raw = append(raw, '\n') // as json.Encoder ends a value
			w.Header().Set("Content-Type", "application/json")
			if _, err := w.Write(raw); err != nil {
				logger.V(2).Info("Writing the answer failed", "err", err)
			}
			if c.release != nil {
				c.release(req, resp)
			}
			return http.StatusOK
		}()
		took := time.Since(start)
		h.metrics.observe(verb, code, took)
		logger.V(4).Info("Served request", "code", code, "took", took)
	})
}

// readBody reads the request body into buf. A body over limit is 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) (int, error) {
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return http.StatusOK, nil
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds the limit of %d bytes (--max-request-bytes)", limit)
	default:
		return http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)
	}
}

// decode decodes one JSON value from data into v with encoding/json; only
// white space may follow it. A failure is 400, with the decoder's reason.
func decode(data []byte, v any) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = extra
			if err == nil {
				err = errors.New("more than one JSON value")
			}
		}
	}
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("malformed JSON: %w", err)
	}
	return http.StatusOK, nil
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// validArgs: filter and prioritize need the pod and the candidate nodes, by
// name (nodeCacheCapable: true) or as Node objects.
func validArgs(args *extenderv1.ExtenderArgs) error {
	switch {
	case args.Pod == nil:
		return errors.New("no Pod")
	case args.NodeNames == nil && args.Nodes == nil:
		return errors.New("neither NodeNames nor Nodes")
	}
	return nil
}

func validBindingArgs(args *extenderv1.ExtenderBindingArgs) error {
	switch {
	case args.PodName == "" || args.PodNamespace == "":
		return errors.New("no PodName or PodNamespace")
	case args.PodUID == "":
		return errors.New("no PodUID")
	case args.Node == "":
		return errors.New("no Node")
	}
	return nil
}

func validPreemptionArgs(args *extenderv1.ExtenderPreemptionArgs) error {
	if args.Pod == nil {
		return errors.New("no Pod")
	}
	return nil
}

// requestValues are the log keys and values that name a request's pod.
func requestValues(req any) []any {
	switch r := req.(type) {
	case *extenderv1.ExtenderArgs:
		return []any{"pod", klog.KObj(r.Pod)}
	case *extenderv1.ExtenderPreemptionArgs:
		return []any{"pod", klog.KObj(r.Pod)}
	case *extenderv1.ExtenderBindingArgs:
		return []any{"pod", klog.KRef(r.PodNamespace, r.PodName), "podUID", r.PodUID, "node", r.Node}
	}
	return nil
}
