package validation

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// TestValidateExternalPolicyArgs: every invalid field of the External
// strategy is reported with its path, its value and what is allowed.
func TestValidateExternalPolicyArgs(t *testing.T) {
	good := config.ExternalPolicy{Endpoint: "127.0.0.1:50051", Timeout: 30 * time.Millisecond, Fallback: "FragFit",
		Mode: config.ExternalEnforce, CircuitBreaker: config.CircuitBreaker{Failures: 5, OpenFor: 10 * time.Second}}
	tests := []struct {
		name     string
		strategy config.ScoringStrategyType
		edit     func(*config.ExternalPolicy)
		want     []string // the start of each error
	}{
		{name: "defaults", strategy: config.ScoringStrategyExternal},
		{name: "unix socket", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Endpoint = "unix:///run/policy.sock" }},
		{name: "shadow", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Mode = config.ExternalShadow }},
		{name: "no endpoint", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Endpoint = "" },
			want: []string{`args.external.endpoint: Invalid value: "": want host:port, or unix:///path/to/socket`}},
		{name: "model instead of endpoint", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Endpoint, e.Model = "", "/etc/gpusched/model.json" }},
		{name: "model with TLS and no deadline", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) {
			e.Endpoint, e.Model, e.Timeout, e.Mode = "", "/etc/gpusched/model.json", 0, "Canary"
			e.TLS = &config.ExternalTLS{CAFile: "ca.crt"}
		}, want: []string{
			"args.external.tls: Forbidden: only with endpoint: a model is not called over the network",
			`args.external.mode: Unsupported value: "Canary"`,
		}},
		{name: "model and endpoint", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Model = "/etc/gpusched/model.json" },
			want: []string{`args.external.model: Invalid value: "/etc/gpusched/model.json": set endpoint (a policy service) or model (a model file), not both`}},
		{name: "model with another strategy", strategy: "PairFit", edit: func(e *config.ExternalPolicy) { e.Endpoint, e.Model = "", "/etc/gpusched/model.json" },
			want: []string{"args.external: Forbidden: only with scoringStrategy.type External"}},
		{name: "endpoint without port", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) { e.Endpoint = "policy.example" },
			want: []string{`args.external.endpoint: Invalid value: "policy.example"`}},
		{name: "everything wrong", strategy: config.ScoringStrategyExternal, edit: func(e *config.ExternalPolicy) {
			e.Timeout, e.Fallback, e.Mode = 6*time.Second, "External", "Canary"
			e.CircuitBreaker = config.CircuitBreaker{Failures: 0, OpenFor: -time.Second}
			e.TLS = &config.ExternalTLS{CertFile: "client.crt"}
		}, want: []string{
			`args.external.timeout: Invalid value: "6s": must be more than 0 and at most 5s`,
			`args.external.fallback: Unsupported value: "External": supported values: "BestFit"`,
			`args.external.mode: Unsupported value: "Canary": supported values: "Enforce", "Shadow"`,
			`args.external.circuitBreaker.failures: Invalid value: 0: must be 1 or more`,
			`args.external.circuitBreaker.openFor: Invalid value: "-1s": must be more than 0`,
			`args.external.tls: Invalid value: "certFile client.crt, keyFile ": set both certFile and keyFile, or neither`,
		}},
		{name: "external with another strategy", strategy: "FragFit",
			want: []string{"args.external: Forbidden: only with scoringStrategy.type External"}},
		{name: "unknown strategy", strategy: "Tetris",
			want: []string{`args.scoringStrategy.type: Invalid value: "Tetris": unknown policy "Tetris": want one of BestFit,`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: tt.strategy}, External: good}
			if tt.edit != nil {
				tt.edit(&args.External)
			}
			errs := validateScoringType(field.NewPath("args"), args)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %q", errs, tt.want)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %q, want it to start with %q", e.Error(), tt.want[i])
				}
			}
		})
	}
}
