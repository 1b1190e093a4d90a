package e2e

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/apis/config/validation"
	"github.com/gpusched/gpusched/pkg/extender"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator"
)

// TestPolicyRegistryAgrees: every place that names policies takes them from
// the engine's registry: configuration validation, the extender's --policy
// and --placement-args, and the simulator's --policies accept every
// registered policy, and reject an unknown one with the engine's one message
// naming the allowed ones. (docs/policies.md's table: pkg/gpu's
// TestPolicyDocs.)
func TestPolicyRegistryAgrees(t *testing.T) {
	const unknown = "Tetris"
	_, err := gpu.LookupPolicy(unknown)
	if err == nil {
		t.Fatalf("%s is registered", unknown)
	}
	want := err.Error()
	if !strings.Contains(want, strings.Join(gpu.PolicyNames(), ", ")) {
		t.Fatalf("the engine's message %q does not name every policy", want)
	}
	cfg, err := simulator.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}

	check := func(t *testing.T, where string, name string, err error) {
		t.Helper()
		switch {
		case name == unknown && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %s: error %v, want one containing %q", where, name, err, want)
		case name != unknown && err != nil:
			t.Errorf("%s: %s refused: %v", where, name, err)
		}
	}
	for _, name := range append(gpu.PolicyNames(), unknown) {
		t.Run(name, func(t *testing.T) {
			args := &config.GPUPlacementArgs{ScoringStrategy: config.ScoringStrategy{Type: config.ScoringStrategyType(name),
				Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}}}
			check(t, "validation", name, validation.ValidateGPUPlacementArgs(field.NewPath("args"), args).ToAggregate())

			_, err := load.GPUPlacementArgsFromYAML([]byte("scoringStrategy:\n  type: " + name + "\n"))
			check(t, "--placement-args", name, err)

			opts := extender.NewOptions()
			opts.Policy = name
			check(t, "extender --policy", name, opts.Validate())

			_, err = simulator.ProfilesFor(cfg.DeepCopy(), []string{name})
			check(t, "simulator --policies", name, err)
		})
	}

	fs := pflag.NewFlagSet("extender", pflag.ContinueOnError)
	extender.NewOptions().AddFlags(fs)
	if usage := fs.Lookup("policy").Usage; !strings.Contains(usage, strings.Join(gpu.PolicyNames(), ", ")) {
		t.Errorf("extender --policy help %q does not list the registered policies", usage)
	}
}
