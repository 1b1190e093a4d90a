package validation

import (
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// maxExternalTimeout bounds the per-pod deadline: every pod's scheduling
// cycle waits up to it.
const maxExternalTimeout = 5 * time.Second

// validateScoringType checks the scoring strategy's type and, for External,
// its configuration; any other type must leave External unset.
func validateScoringType(path *field.Path, args *config.GPUPlacementArgs) field.ErrorList {
	t := args.ScoringStrategy.Type
	if t != config.ScoringStrategyExternal {
		if _, err := gpu.LookupPolicy(string(t)); err != nil {
			return field.ErrorList{field.Invalid(path.Child("scoringStrategy", "type"), t,
				err.Error()+"; or "+string(config.ScoringStrategyExternal)+" for a policy service")}
		}
		if args.External.Endpoint != "" || args.External.Model != "" {
			return field.ErrorList{field.Forbidden(path.Child("external"), "only with scoringStrategy.type "+string(config.ScoringStrategyExternal))}
		}
		return nil
	}
	return validateExternal(path.Child("external"), &args.External)
}

// validateExternal checks an External strategy's configuration.
func validateExternal(path *field.Path, e *config.ExternalPolicy) field.ErrorList {
	var errs field.ErrorList
	switch {
	case e.Model != "" && e.Endpoint != "":
		errs = append(errs, field.Invalid(path.Child("model"), e.Model, "set endpoint (a policy service) or model (a model file), not both"))
	case e.Model != "":
		// A model is evaluated in-process: no connection, deadline or
		// breaker to configure.
		if e.TLS != nil {
			errs = append(errs, field.Forbidden(path.Child("tls"), "only with endpoint: a model is not called over the network"))
		}
		return append(errs, validateFallbackAndMode(path, e)...)
	default:
		if err := checkEndpoint(e.Endpoint); err != "" {
			errs = append(errs, field.Invalid(path.Child("endpoint"), e.Endpoint, err+"; or set model to a model file"))
		}
	}
	if e.Timeout <= 0 || e.Timeout > maxExternalTimeout {
		errs = append(errs, field.Invalid(path.Child("timeout"), e.Timeout.String(), "must be more than 0 and at most "+maxExternalTimeout.String()))
	}
	errs = append(errs, validateFallbackAndMode(path, e)...)
	if e.CircuitBreaker.Failures < 1 {
		errs = append(errs, field.Invalid(path.Child("circuitBreaker", "failures"), e.CircuitBreaker.Failures, "must be 1 or more"))
	}
	if e.CircuitBreaker.OpenFor <= 0 {
		errs = append(errs, field.Invalid(path.Child("circuitBreaker", "openFor"), e.CircuitBreaker.OpenFor.String(), "must be more than 0"))
	}
	if t := e.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, field.Invalid(path.Child("tls"), "certFile "+t.CertFile+", keyFile "+t.KeyFile, "set both certFile and keyFile, or neither"))
	}
	return errs
}

// validateFallbackAndMode checks what a service and a model share: the
// fallback policy and the mode.
func validateFallbackAndMode(path *field.Path, e *config.ExternalPolicy) field.ErrorList {
	var errs field.ErrorList
	if _, err := gpu.LookupPolicy(string(e.Fallback)); err != nil {
		errs = append(errs, field.NotSupported(path.Child("fallback"), e.Fallback, gpu.PolicyNames()))
	}
	modes := []string{string(config.ExternalEnforce), string(config.ExternalShadow)}
	if !contains(modes, string(e.Mode)) {
		errs = append(errs, field.NotSupported(path.Child("mode"), e.Mode, modes))
	}
	return errs
}

// checkEndpoint says what is wrong with a policy service's address, or "".
func checkEndpoint(endpoint string) string {
	if path, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		if path == "" {
			return "want unix:///path/to/socket with a path"
		}
		return ""
	}
	if _, port, err := net.SplitHostPort(endpoint); err != nil || port == "" {
		return "want host:port, or unix:///path/to/socket"
	}
	return ""
}
