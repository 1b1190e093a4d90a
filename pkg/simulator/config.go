package simulator

import (
	_ "embed"
	"fmt"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme" // decodes GPUPlacementArgs
	"github.com/gpusched/gpusched/pkg/apis/config/validation"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
)

// defaultConfig is the profile the simulator runs without --config: the
// default filters (CPU, memory, taints, affinity, ...) and GPUPlacement, with
// GPUPlacement as the only scorer so that the policy alone decides among the
// feasible nodes, every node scored, as the FGD protocol measures.
//
//go:embed default-config.yaml
var defaultConfig []byte

// LoadConfig reads a KubeSchedulerConfiguration, decoded, defaulted and
// validated by the kube-scheduler's own code, so a file the scheduler accepts
// is the file the simulator runs. An empty path loads the built-in
// simulation profile.
func LoadConfig(path string) (*schedconfig.KubeSchedulerConfiguration, error) {
	data, source := defaultConfig, "built-in simulation config"
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, err
		}
		source = path
	}
	obj, gvk, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("%s: want a KubeSchedulerConfiguration, got %s", source, gvk)
	}
	cfg.TypeMeta.APIVersion = gvk.GroupVersion().String()
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("%s: invalid configuration: %w", source, err)
	}
	// The scheduler validates out-of-tree plugin args when it builds the
	// plugin; check them here so that a bad file fails before any run.
	var errs field.ErrorList
	for i := range cfg.Profiles {
		for j, pc := range cfg.Profiles[i].PluginConfig {
			if args, ok := pc.Args.(*config.GPUPlacementArgs); ok {
				path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
				errs = append(errs, validation.ValidateGPUPlacementArgs(path, args)...)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: invalid configuration: %w", source, errs.ToAggregate())
	}
	return cfg, nil
}

// Profile is one scheduler profile to simulate, named for the report.
type Profile struct {
	Name    string
	Profile *schedconfig.KubeSchedulerProfile
	// PercentageOfNodesToScore is the configuration's, when the profile sets none.
	PercentageOfNodesToScore *int32
	// Migrations is how many pods the runs of the profile may move to make
	// room for pods that fit nowhere (docs/defragmentation.md); the zero
	// budget moves none.
	Migrations MigrationBudget
}

// ProfilesFor returns what to simulate: one profile per policy when policies
// are given — the configuration's first profile with GPUPlacement's scoring
// type set to the policy — else every profile of the configuration.
func ProfilesFor(cfg *schedconfig.KubeSchedulerConfiguration, policies []string) ([]Profile, error) {
	pct := cfg.PercentageOfNodesToScore
	if len(policies) == 0 {
		out := make([]Profile, len(cfg.Profiles))
		for i := range cfg.Profiles {
			out[i] = Profile{Name: cfg.Profiles[i].SchedulerName, Profile: &cfg.Profiles[i], PercentageOfNodesToScore: pct}
		}
		return out, nil
	}
	base := &cfg.Profiles[0]
	if !usesGPUPlacement(base) {
		return nil, fmt.Errorf("profile %q does not enable %s: --policies sets its scoring type, so the configuration's first profile must enable it",
			base.SchedulerName, gpuplacement.Name)
	}
	var out []Profile
	for _, policy := range policies {
		name := policy
		if policy == DefaultPolicy {
			policy = string(gpu.DefaultPolicy)
			name = fmt.Sprintf("%s (%s)", DefaultPolicy, policy)
		}
		if _, err := gpu.LookupPolicy(policy); err != nil {
			return nil, fmt.Errorf("--policies: %w, or %s", err, DefaultPolicy)
		}
		p := base.DeepCopy()
		p.SchedulerName = name
		args := gpuPlacementArgs(p)
		args.ScoringStrategy.Type = config.ScoringStrategyType(policy)
		// A policy service's settings go with the External type, which
		// the policy replaces.
		args.External = config.ExternalPolicy{}
		out = append(out, Profile{Name: name, Profile: p, PercentageOfNodesToScore: pct})
	}
	return out, nil
}

// DefaultPolicy in --policies names GPUPlacement's default policy, whichever
// it is; the report shows it as "default (<type>)".
const DefaultPolicy = "default"

func usesGPUPlacement(p *schedconfig.KubeSchedulerProfile) bool {
	if p.Plugins == nil {
		return false
	}
	for _, set := range []schedconfig.PluginSet{p.Plugins.MultiPoint, p.Plugins.Score, p.Plugins.Filter} {
		for _, pl := range set.Enabled {
			if pl.Name == gpuplacement.Name {
				return true
			}
		}
	}
	return false
}

// findGPUPlacementArgs returns the profile's GPUPlacement args, or nil.
func findGPUPlacementArgs(p *schedconfig.KubeSchedulerProfile) *config.GPUPlacementArgs {
	for i := range p.PluginConfig {
		if p.PluginConfig[i].Name == gpuplacement.Name {
			if args, ok := p.PluginConfig[i].Args.(*config.GPUPlacementArgs); ok {
				return args
			}
		}
	}
	return nil
}

// gpuPlacementArgs returns the profile's GPUPlacement args, adding defaulted
// args when the profile has none.
func gpuPlacementArgs(p *schedconfig.KubeSchedulerProfile) *config.GPUPlacementArgs {
	if args := findGPUPlacementArgs(p); args != nil {
		return args
	}
	args, err := load.GPUPlacementArgs(nil)
	if err != nil {
		panic(err) // the defaults are valid: a mistake in code, not in input
	}
	p.PluginConfig = append(p.PluginConfig, schedconfig.PluginConfig{Name: gpuplacement.Name, Args: args})
	return args
}

// filtersWithGPUPlacement reports whether GPUPlacement filters in the
// profile (enabled at Filter or multiPoint, and not disabled at Filter).
func filtersWithGPUPlacement(p Profile) bool {
	plugins := p.Profile.Plugins
	if plugins == nil {
		return false
	}
	for _, pl := range plugins.Filter.Disabled {
		if pl.Name == gpuplacement.Name || pl.Name == "*" {
			return slices.ContainsFunc(plugins.Filter.Enabled, func(pl schedconfig.Plugin) bool { return pl.Name == gpuplacement.Name })
		}
	}
	for _, set := range []schedconfig.PluginSet{plugins.MultiPoint, plugins.Filter} {
		for _, pl := range set.Enabled {
			if pl.Name == gpuplacement.Name {
				return true
			}
		}
	}
	return false
}
