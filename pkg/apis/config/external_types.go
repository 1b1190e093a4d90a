package config

import (
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// ScoringStrategyExternal is the scoring strategy whose scores come from a
// policy service (docs/policy-service.md): one call per pod over its
// feasible nodes; or from a model file the scheduler evaluates itself
// (ExternalPolicy.Model). The engine's policies are the other strategies
// (gpu.Policies); External is not one of them, since it places nothing: the
// fallback policy (ExternalPolicy.Fallback) chooses the GPUs on the node
// the service ranks first, and decides alone when the service does not
// answer in time or answers wrongly.
const ScoringStrategyExternal ScoringStrategyType = "External"

// ScoringStrategyTypes lists every scoring strategy type: the engine's
// policies, then External.
func ScoringStrategyTypes() []string {
	return append(gpu.PolicyNames(), string(ScoringStrategyExternal))
}

// ExternalPolicy configures the External scoring strategy.
type ExternalPolicy struct {
	// Endpoint is the policy service's address: host:port, or
	// unix:///path for a Unix socket. Exactly one of Endpoint and Model.
	Endpoint string
	// Model is a model file (policyservice.ModelFormat) the scheduler
	// evaluates in-process instead of calling a service: no deadline, no
	// circuit breaker. Exactly one of Endpoint and Model.
	Model string
	// TLS, when set, secures the connection; nil connects in plain text.
	TLS *ExternalTLS
	// Timeout bounds one call, per pod.
	Timeout time.Duration
	// Fallback is the engine policy that picks the GPUs on a node, and
	// scores the nodes when the service's answer is not used.
	Fallback gpu.PolicyType
	// Mode is ExternalEnforce or ExternalShadow.
	Mode ExternalMode
	// CircuitBreaker stops calling a failing service for a while.
	CircuitBreaker CircuitBreaker
}

// ExternalTLS is the policy service's TLS: a CA to verify it by and,
// for mutual TLS, the scheduler's client certificate and key.
type ExternalTLS struct {
	// CAFile is the PEM bundle the service's certificate is verified
	// against; "" uses the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key; both or
	// neither.
	CertFile, KeyFile string
	// ServerName overrides the name the service's certificate is checked
	// for; "" uses the endpoint's host.
	ServerName string
}

// ExternalMode says what the service's scores do.
type ExternalMode string

const (
	// ExternalEnforce ranks the nodes by the service's scores.
	ExternalEnforce ExternalMode = "Enforce"
	// ExternalShadow keeps the fallback policy's decision and counts (and
	// logs) the pods where the service's best node differs from it.
	ExternalShadow ExternalMode = "Shadow"
)

// CircuitBreaker opens after Failures calls in a row fail (time out, error
// or answer wrongly): for OpenFor no call is made and the fallback policy
// decides; then one call tries the service again, and closes the breaker
// when it succeeds.
type CircuitBreaker struct {
	Failures int32
	OpenFor  time.Duration
}
