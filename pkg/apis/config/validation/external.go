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
		if args.External.Endpoint != "" {
			return field.ErrorList{field.Forbidden(path.Child("external"), "only with scoringStrategy.type "+string(config.ScoringStrategyExternal))}
		}
		return nil
	}
	return validateExternal(path.Child("external"), &args.External)
}

// validateExternal checks an External strategy's configuration.
func validateExternal(path *field.Path, e *config.ExternalPolicy) field.ErrorList {
	var errs field.ErrorList
	if err := checkEndpoint(e.Endpoint); err != "" {
		errs = append(errs, field.Invalid(path.Child("endpoint"), e.Endpoint, err))
	}
	if e.Timeout <= 0 || e.Timeout > maxExternalTimeout {
		errs = append(errs, field.Invalid(path.Child("timeout"), e.Timeout.String(), "must be more than 0 and at most "+maxExternalTimeout.String()))
	}
	if _, err := gpu.LookupPolicy(string(e.Fallback)); err != nil {
		errs = append(errs, field.NotSupported(path.Child("fallback"), e.Fallback, gpu.PolicyNames()))
	}
	modes := []string{string(config.ExternalEnforce), string(config.ExternalShadow)}
	if !contains(modes, string(e.Mode)) {
		errs = append(errs, field.NotSupported(path.Child("mode"), e.Mode, modes))
	}
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
