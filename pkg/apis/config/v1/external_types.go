package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// ExternalPolicy configures scoringStrategy.type External: a policy service
// scores the feasible nodes of each pod (docs/policy-service.md).
type ExternalPolicy struct {
	// Endpoint is the policy service's address: host:port, or
	// unix:///path. Exactly one of endpoint and model.
	Endpoint string `json:"endpoint,omitempty"`
	// Model is the path of a model file (format gpusched.io/model/v1,
	// docs/policy-service.md#models) that the scheduler evaluates itself,
	// with no service to call. Exactly one of endpoint and model.
	Model string `json:"model,omitempty"`
	// TLS secures the connection; absent, it is plain text.
	TLS *ExternalTLS `json:"tls,omitempty"`
	// Timeout bounds the call for one pod; past it the fallback policy
	// decides. Default: 30ms.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Fallback is the placement policy that chooses the GPUs on a node and
	// decides when the service's answer is not used. Default: the default
	// policy (PairFit).
	Fallback string `json:"fallback,omitempty"`
	// Mode is Enforce (the service's scores rank the nodes) or Shadow (the
	// fallback policy decides; where the service would have chosen
	// otherwise is logged and counted). Default: Enforce.
	Mode string `json:"mode,omitempty"`
	// CircuitBreaker stops calling a failing service for a while.
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`
}

// ExternalTLS is the policy service's TLS.
type ExternalTLS struct {
	// CAFile verifies the service's certificate; default: the system's roots.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile are the scheduler's client certificate and key,
	// for mutual TLS: both or neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName is the name the service's certificate must carry; default:
	// the endpoint's host.
	ServerName string `json:"serverName,omitempty"`
}

// CircuitBreaker opens after Failures failed calls in a row, for OpenFor.
type CircuitBreaker struct {
	// Failures is the number of failed calls in a row that opens the
	// breaker. Default: 5.
	Failures *int32 `json:"failures,omitempty"`
	// OpenFor is how long no call is made once it opens. Default: 10s.
	OpenFor *metav1.Duration `json:"openFor,omitempty"`
}

// The defaults of an ExternalPolicy.
const (
	DefaultExternalTimeout  = 30 * time.Millisecond
	DefaultBreakerFailures  = 5
	DefaultBreakerOpenFor   = 10 * time.Second
	defaultExternalMode     = string(config.ExternalEnforce)
	defaultExternalFallback = string(gpu.DefaultPolicy)
)

// setDefaultsExternal fills in an ExternalPolicy's defaults, when there is one.
func setDefaultsExternal(e *ExternalPolicy) {
	if e == nil {
		return
	}
	if e.Timeout == nil {
		e.Timeout = &metav1.Duration{Duration: DefaultExternalTimeout}
	}
	if e.Fallback == "" {
		e.Fallback = defaultExternalFallback
	}
	if e.Mode == "" {
		e.Mode = defaultExternalMode
	}
	if e.CircuitBreaker == nil {
		e.CircuitBreaker = &CircuitBreaker{}
	}
	if e.CircuitBreaker.Failures == nil {
		f := int32(DefaultBreakerFailures)
		e.CircuitBreaker.Failures = &f
	}
	if e.CircuitBreaker.OpenFor == nil {
		e.CircuitBreaker.OpenFor = &metav1.Duration{Duration: DefaultBreakerOpenFor}
	}
}

func convertExternalToConfig(in *ExternalPolicy, out *config.ExternalPolicy) {
	*out = config.ExternalPolicy{Endpoint: in.Endpoint, Model: in.Model, Fallback: gpu.PolicyType(in.Fallback), Mode: config.ExternalMode(in.Mode)}
	if in.TLS != nil {
		out.TLS = &config.ExternalTLS{CAFile: in.TLS.CAFile, CertFile: in.TLS.CertFile, KeyFile: in.TLS.KeyFile, ServerName: in.TLS.ServerName}
	}
	if in.Timeout != nil {
		out.Timeout = in.Timeout.Duration
	}
	if b := in.CircuitBreaker; b != nil {
		if b.Failures != nil {
			out.CircuitBreaker.Failures = *b.Failures
		}
		if b.OpenFor != nil {
			out.CircuitBreaker.OpenFor = b.OpenFor.Duration
		}
	}
}

func convertExternalFromConfig(in *config.ExternalPolicy) *ExternalPolicy {
	if in.Endpoint == "" && in.Model == "" && in.Timeout == 0 {
		return nil
	}
	failures := in.CircuitBreaker.Failures
	out := &ExternalPolicy{Endpoint: in.Endpoint, Model: in.Model, Fallback: string(in.Fallback), Mode: string(in.Mode),
		Timeout:        &metav1.Duration{Duration: in.Timeout},
		CircuitBreaker: &CircuitBreaker{Failures: &failures, OpenFor: &metav1.Duration{Duration: in.CircuitBreaker.OpenFor}}}
	if in.TLS != nil {
		out.TLS = &ExternalTLS{CAFile: in.TLS.CAFile, CertFile: in.TLS.CertFile, KeyFile: in.TLS.KeyFile, ServerName: in.TLS.ServerName}
	}
	return out
}

// deepCopyExternal copies e.
func deepCopyExternal(e *ExternalPolicy) *ExternalPolicy {
	if e == nil {
		return nil
	}
	out := *e
	if e.TLS != nil {
		t := *e.TLS
		out.TLS = &t
	}
	if e.Timeout != nil {
		d := *e.Timeout
		out.Timeout = &d
	}
	if b := e.CircuitBreaker; b != nil {
		c := CircuitBreaker{}
		if b.Failures != nil {
			f := *b.Failures
			c.Failures = &f
		}
		if b.OpenFor != nil {
			d := *b.OpenFor
			c.OpenFor = &d
		}
		out.CircuitBreaker = &c
	}
	return &out
}
