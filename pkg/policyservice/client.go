package policyservice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// Cause is why the policy service's answer was not used for a pod, as the
// fallbacks metric and the pod's event name it.
type Cause string

const (
	// CauseTimeout: no answer within the deadline.
	CauseTimeout Cause = "timeout"
	// CauseError: the call failed (connection refused, an error status).
	CauseError Cause = "error"
	// CauseMalformed: the answer did not hold one finite score for each
	// node of the request.
	CauseMalformed Cause = "malformed"
	// CauseCircuitOpen: the circuit breaker is open; no call was made.
	CauseCircuitOpen Cause = "circuit-open"
)

// causes lists every Cause, for the metric's labels.
var causes = []Cause{CauseTimeout, CauseError, CauseMalformed, CauseCircuitOpen}

// Fallback says why the service's answer was not used.
type Fallback struct {
	Cause Cause
	Err   error
}

func (f *Fallback) Error() string { return fmt.Sprintf("%s: %v", f.Cause, f.Err) }

// Scorer asks a policy service for node scores, one call per pod, within
// the configured deadline, behind a circuit breaker; or, configured with a
// model (ExternalPolicy.Model), scores with it in-process, with no deadline
// or breaker. It is safe for concurrent use.
type Scorer struct {
	cfg config.ExternalPolicy
	// model, when the configuration names one, scores in-process: no call,
	// no deadline, no breaker.
	model   *Model
	session *session
	conn    *grpc.ClientConn
	client  pb.PolicyServiceClient
	breaker breaker
}

// New returns a Scorer for the validated configuration. It does not
// connect: the first call does, so a service that starts after the
// scheduler is used once it is up. A TLS file that cannot be read, or a
// model file that cannot be read or is not a model, is an error here, at
// startup.
func New(cfg config.ExternalPolicy) (*Scorer, error) {
	if cfg.Model != "" {
		m, err := LoadModel(cfg.Model)
		if err != nil {
			return nil, err
		}
		registerMetrics()
		return &Scorer{cfg: cfg, model: m}, nil
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("policy service %s: %w", cfg.Endpoint, err)
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("policy service %s: %w", cfg.Endpoint, err)
	}
	registerMetrics()
	return &Scorer{cfg: cfg, session: newSession(), conn: conn, client: pb.NewPolicyServiceClient(conn),
		breaker: breaker{limit: int(cfg.CircuitBreaker.Failures), openFor: cfg.CircuitBreaker.OpenFor}}, nil
}

func tlsConfig(t *config.ExternalTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.caFile: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.caFile %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.certFile, tls.keyFile: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Config is the configuration the Scorer was built with.
func (s *Scorer) Config() config.ExternalPolicy { return s.cfg }

// ScoreNodes scores a pod's nodes, described by nodes: a service is sent
// a ScoreRequest, incremental when it keeps the session's last one; a
// model scores their feature rows in-process. The scores are in nodes'
// order; or, when they cannot be used, why (and counts it). It keeps
// nothing of nodes once it returns: the caller may reuse their memory.
func (s *Scorer) ScoreNodes(ctx context.Context, pod *v1.Pod, d *gpu.Demand, nodes []gpu.NodeFeatures, fallback gpu.PolicyType) ([]float64, *Fallback) {
	if s.model == nil {
		return s.call(ctx, s.session.request(pod, d, nodes, fallback), nodes)
	}
	start := time.Now()
	scores := s.model.ScoreFeatures(nodes, d)
	callDuration.Observe(time.Since(start).Seconds())
	return s.checkModel(scores, func(i int) string { return nodes[i].Name })
}

// Source names where the scores come from, for messages: "policy service
// ENDPOINT" or "model PATH".
func (s *Scorer) Source() string {
	if s.model != nil {
		return "model " + s.cfg.Model
	}
	return "policy service " + s.cfg.Endpoint
}

// Shadow reports whether the service's scores are only compared, never used.
func (s *Scorer) Shadow() bool { return s.cfg.Mode == config.ExternalShadow }

// Close closes the connection, if there is one.
func (s *Scorer) Close() error {
	if s.conn == nil {
		return nil
	}
	return s.conn.Close()
}

// call sends out's request and returns the scores of nodes, the nodes it
// was built from, in their order; or, when the answer cannot be used, why
// (and counts it). An incremental request whose table the service no
// longer holds, or that the service answers for its sent nodes only (a
// service that keeps no table), is sent again whole within the same
// deadline; the call's duration covers both.
func (s *Scorer) call(ctx context.Context, out *outgoing, nodes []gpu.NodeFeatures) ([]float64, *Fallback) {
	if !s.breaker.allow(time.Now()) {
		s.session.answered(out, false)
		fallbacks.WithLabelValues(string(CauseCircuitOpen)).Inc()
		return nil, &Fallback{Cause: CauseCircuitOpen, Err: fmt.Errorf("%d calls in a row failed; the next try is within %v", s.cfg.CircuitBreaker.Failures, s.cfg.CircuitBreaker.OpenFor)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	requests.WithLabelValues(requestKind(out.req)).Inc()
	reply, err := s.client.Score(ctx, out.req)
	var inOrder []float64
	var checkErr error
	if err == nil {
		inOrder, checkErr = checkReply(wholeNames(out, nodes), reply)
	}
	if out.req.Base != 0 && (status.Code(err) == codes.FailedPrecondition || err == nil && checkErr != nil && !reply.GetKept()) {
		s.session.resend(out)
		requests.WithLabelValues(kindResent).Inc()
		reply, err = s.client.Score(ctx, out.req)
		if err == nil {
			inOrder, checkErr = checkReply(wholeNames(out, nodes), reply)
		}
	}
	callDuration.Observe(time.Since(start).Seconds())
	var scores []float64
	var fb *Fallback
	switch {
	case err != nil && (status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)):
		fb = &Fallback{Cause: CauseTimeout, Err: fmt.Errorf("no answer within %v", s.cfg.Timeout)}
	case err != nil:
		fb = &Fallback{Cause: CauseError, Err: err}
	case checkErr != nil:
		fb = &Fallback{Cause: CauseMalformed, Err: checkErr}
	default:
		scores = make([]float64, len(nodes))
		for k, i := range out.order {
			scores[i] = inOrder[k]
		}
	}
	s.session.answered(out, fb == nil && reply.GetKept())
	result := "ok"
	if fb != nil {
		result = string(fb.Cause)
		fallbacks.WithLabelValues(result).Inc()
	}
	calls.WithLabelValues(result).Inc()
	if s.breaker.record(fb == nil, time.Now()) {
		circuitOpen.Set(1)
	} else if fb == nil {
		circuitOpen.Set(0)
	}
	return scores, fb
}

// checkModel counts one call of the model and returns its scores; a score
// that is not finite (a product or sum past float64's range) is a
// malformed answer, as from a service. name names the i-th node.
func (s *Scorer) checkModel(scores []float64, name func(int) string) ([]float64, *Fallback) {
	var fb *Fallback
	if i := slices.IndexFunc(scores, notFinite); i >= 0 {
		fb = &Fallback{Cause: CauseMalformed, Err: fmt.Errorf("the model scores node %q %v: want a finite number", name(i), scores[i])}
	}
	if fb != nil {
		fallbacks.WithLabelValues(string(fb.Cause)).Inc()
		calls.WithLabelValues(string(fb.Cause)).Inc()
		return nil, fb
	}
	calls.WithLabelValues("ok").Inc()
	return scores, nil
}

// wholeNames are the names of out's whole node list, in its order.
func wholeNames(out *outgoing, nodes []gpu.NodeFeatures) []string {
	out.names = slices.Grow(out.names[:0], len(out.order))[:len(out.order)]
	for k, i := range out.order {
		out.names[k] = nodes[i].Name
	}
	return out.names
}

// checkReply returns the reply's scores in the order of names, the
// request's whole node list, or what is wrong with it: a count that is not
// the request's, a node the request did not name or named twice, a score
// that is not finite, both forms of scores.
func checkReply(names []string, reply *pb.ScoreReply) ([]float64, error) {
	if values := reply.GetValues(); len(values) > 0 {
		switch {
		case len(reply.GetScores()) > 0:
			return nil, fmt.Errorf("%d scores and %d values: want one or the other", len(reply.GetScores()), len(values))
		case len(values) != len(names):
			return nil, fmt.Errorf("%d values for %d nodes: want one per node, in the request's order", len(values), len(names))
		}
		if i := slices.IndexFunc(values, notFinite); i >= 0 {
			return nil, fmt.Errorf("value %v for node %q: want a finite number", values[i], names[i])
		}
		return values, nil
	}
	if len(reply.GetScores()) != len(names) {
		return nil, fmt.Errorf("%d scores for %d nodes: want one per node", len(reply.GetScores()), len(names))
	}
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	out := make([]float64, len(names))
	seen := make([]bool, len(names))
	for _, s := range reply.Scores {
		i, ok := index[s.Node]
		switch {
		case !ok:
			return nil, fmt.Errorf("score for node %q, which is not one of the request's nodes", s.Node)
		case seen[i]:
			return nil, fmt.Errorf("two scores for node %q: want one", s.Node)
		case math.IsNaN(s.Score) || math.IsInf(s.Score, 0):
			return nil, fmt.Errorf("score %v for node %q: want a finite number", s.Score, s.Node)
		}
		seen[i], out[i] = true, s.Score
	}
	return out, nil
}

// breaker is a circuit breaker: closed, it lets every call through; after
// limit failures in a row it opens for openFor, letting none through; then
// it lets one call through (half open), which closes it on success and
// opens it again on failure.
type breaker struct {
	limit   int
	openFor time.Duration

	mu        sync.Mutex
	failures  int
	openUntil time.Time
	probing   bool
}

// allow reports whether a call may be made at now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true
	case now.Before(b.openUntil) || b.probing:
		return false
	}
	b.probing = true
	return true
}

// record counts a call's outcome and reports whether the breaker is open
// after it.
func (b *breaker) record(ok bool, now time.Time) (open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.failures, b.openUntil, b.probing = 0, time.Time{}, false
		return false
	}
	b.failures++
	if b.probing || b.failures >= b.limit {
		b.openUntil, b.probing = now.Add(b.openFor), false
	}
	return !b.openUntil.IsZero()
}

// Compare counts whether the service's best node (the first of the highest
// scores) is among the fallback policy's best nodes (the highest
// BuiltinScore), and returns both nodes.
func (s *Scorer) Compare(nodes []gpu.NodeFeatures, scores []float64) (agree bool, external, builtin string) {
	best, top := 0, math.Inf(-1)
	for i, v := range scores {
		if v > top {
			best, top = i, v
		}
	}
	topBuiltin := math.Inf(-1)
	for i := range nodes {
		topBuiltin = math.Max(topBuiltin, nodes[i].BuiltinScore)
	}
	for i := range nodes {
		if nodes[i].BuiltinScore == topBuiltin {
			builtin = nodes[i].Name
			break
		}
	}
	agree = nodes[best].BuiltinScore == topBuiltin
	mode := string(s.cfg.Mode)
	compared.WithLabelValues(mode).Inc()
	if !agree {
		disagreements.WithLabelValues(mode).Inc()
	}
	return agree, nodes[best].Name, builtin
}

// Rescale maps scores min-max onto 0..maxOut, rounding, as the scheduler's
// integer scores need; the service's scores are magnitudes. A node whose
// score is below the highest gets at most maxOut − 1, so that the
// service's best node stays strictly best however close the others come
// (the environment's argmax, which a scorer is trained for). Equal scores
// all get maxOut.
func Rescale(scores []float64, maxOut int64) []int64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range scores {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	out := make([]int64, len(scores))
	for i, v := range scores {
		switch {
		case v == hi:
			out[i] = maxOut
		default:
			out[i] = min(int64(math.Round((v-lo)/(hi-lo)*float64(maxOut))), maxOut-1)
		}
	}
	return out
}
