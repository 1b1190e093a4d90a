package gpu

import (
	"fmt"
	"strings"
)

// PolicyType names a policy in configuration.
type PolicyType string

// DefaultPolicy is the policy every front end uses when none is configured.
const DefaultPolicy = PolicyPairFit

// PolicyInfo is a policy's registry entry: its name, what it is, what it
// needs from the front end and how its scores compare.
type PolicyInfo struct {
	Type PolicyType
	// Summary is one sentence for flags, validation messages and docs.
	Summary string
	// Weighted: the policy weighs GPU compute and memory by
	// PolicyConfig.Weights.
	Weighted bool
	// NeedsShapes: the policy measures fragmentation against a distribution
	// of typical pods (PolicyConfig.Shapes).
	NeedsShapes bool
	// HostAware: the policy weighs the node's CPU and memory, so front ends
	// give it Request.Host and the pod's CPU and memory (Policy.Demand),
	// and have it score pods without GPUs too.
	HostAware bool
	// Ordinal: the policy's scores order nodes and mean nothing more, so
	// they are rescaled by rank, not min-max (Policy.Rescale).
	Ordinal bool

	build func(PolicyConfig) Strategy
}

// PolicyConfig is what building a policy may take.
type PolicyConfig struct {
	// Weights weigh GPU compute and memory; zero means DefaultWeights. Read
	// by Weighted policies only.
	Weights Weights
	// Shapes is the distribution of typical pods; required by policies that
	// NeedsShapes, ignored by the others.
	Shapes Shapes
	// Fleet is the cluster's GPUs by model, as the front end's ledger
	// counts them; optional. PairFit prices models with it (Fleet).
	Fleet Fleet
}

// registry lists every policy, in the order flags and docs list them.
var registry = []*PolicyInfo{
	{Type: PolicyBestFit, Weighted: true,
		Summary: "the node whose GPUs are most allocated once the pod is placed; a share on the fitting GPU with the least free room",
		build:   func(c PolicyConfig) Strategy { return bestFit{c.Weights} }},
	{Type: PolicySpread, Weighted: true,
		Summary: "the node whose GPUs are least allocated once the pod is placed; a share on the GPU with the most free room",
		build:   func(c PolicyConfig) Strategy { return spread{c.Weights} }},
	{Type: PolicyPacking, Weighted: true,
		Summary: "a share on a GPU already partly used, then any node already in use, then idle nodes; best fit within each",
		build:   func(c PolicyConfig) Strategy { return packing{bestFit{c.Weights}} }},
	{Type: PolicyFGD, NeedsShapes: true, HostAware: true,
		Summary: "Fragmentation Gradient Descent (Weng et al., ATC 2023): where the node's fragmentation for typical pods grows least",
		build:   func(c PolicyConfig) Strategy { return fgd{c.Shapes} }},
	{Type: PolicyFragFit, NeedsShapes: true, HostAware: true, Ordinal: true,
		Summary: "gpusched's fragmentation-aware policy: FGD's measure, counting the room a pod takes from model-limited pods, with exact comparisons; best fit for what it leaves equal",
		build:   func(c PolicyConfig) Strategy { return fragFit{c.Shapes, &priceCache{fleet: c.Fleet}} }},
	{Type: PolicyPairFit, NeedsShapes: true, HostAware: true, Ordinal: true,
		Summary: "where the node loses the least of what its free GPUs could still hold, priced by the packing LP over the typical pods and counted while its CPU admits GPU pods, plus a pressure on GPU models that model-limited pods would find full, charged while their free room is short; FragFit for ties",
		build: func(c PolicyConfig) Strategy {
			return &pairFit{fragFit: fragFit{c.Shapes, &priceCache{fleet: c.Fleet}}}
		}},
	{Type: PolicyRandom, HostAware: true,
		Summary: "a pseudo-random feasible node and GPU (a baseline)",
		build:   func(PolicyConfig) Strategy { return randomPolicy{} }},
	{Type: PolicyDotProd, HostAware: true,
		Summary: "Tetris-style alignment of the pod's CPU and GPU request with the node's free resources (a baseline)",
		build:   func(PolicyConfig) Strategy { return dotProd{} }},
	{Type: PolicyGpuClustering,
		Summary: "keeps pods of one class (a share, 1, 2, 4, 8 GPUs) together; fuller nodes first (a baseline)",
		build:   func(PolicyConfig) Strategy { return gpuClustering{} }},
	{Type: PolicyGpuPacking,
		Summary: "partly used GPUs first, then free GPUs of nodes in use, then idle nodes (a baseline)",
		build:   func(PolicyConfig) Strategy { return gpuPacking{} }},
	{Type: PolicyBestFitCPUGPU, HostAware: true,
		Summary: "the FGD paper's BestFit: the node left with the least free CPU and GPU (a baseline)",
		build:   func(PolicyConfig) Strategy { return bestFitCPUGPU{} }},
}

// Policies lists every registered policy, in the order flags and docs
// list them.
func Policies() []PolicyInfo {
	out := make([]PolicyInfo, len(registry))
	for i, info := range registry {
		out[i] = *info
	}
	return out
}

// PolicyNames lists the names of every registered policy, in order.
func PolicyNames() []string {
	out := make([]string, len(registry))
	for i, info := range registry {
		out[i] = string(info.Type)
	}
	return out
}

// LookupPolicy returns the registry entry of the named policy. An unknown
// name is an error naming every policy there is; every front end and the
// configuration's validation report it with this same text.
func LookupPolicy(name string) (PolicyInfo, error) {
	info, err := lookup(name)
	if err != nil {
		return PolicyInfo{}, err
	}
	return *info, nil
}

func lookup(name string) (*PolicyInfo, error) {
	for _, info := range registry {
		if string(info.Type) == name {
			return info, nil
		}
	}
	return nil, fmt.Errorf("unknown policy %q: want one of %s", name, strings.Join(PolicyNames(), ", "))
}

// NewPolicy builds the named policy from cfg.
func NewPolicy(t PolicyType, cfg PolicyConfig) (*Policy, error) {
	info, err := lookup(string(t))
	if err != nil {
		return nil, err
	}
	if info.Weighted {
		if cfg.Weights == (Weights{}) {
			cfg.Weights = DefaultWeights
		}
		if err := cfg.Weights.validate(); err != nil {
			return nil, fmt.Errorf("policy %s: %w", t, err)
		}
	}
	p := &Policy{info: info}
	if info.NeedsShapes {
		if cfg.Shapes == nil {
			return nil, fmt.Errorf("policy %s measures fragmentation against typical pods: PolicyConfig.Shapes is required", t)
		}
		p.shapes = cfg.Shapes
	}
	p.fleet, p.cfg = cfg.Fleet, cfg
	p.strategy = info.build(cfg)
	return p, nil
}

// NewWorkloadPolicy builds policy t with its defaults as a front end that
// reads a whole cluster places with: measuring fragmentation, where t does,
// against the workload's typical pods, fixed (StaticShapes), and pricing
// models by fleet. what-if, the views and the defragmenter build theirs
// with it, as the simulator builds GPUPlacement's.
func NewWorkloadPolicy(t PolicyType, typical []TypicalPod, fleet Fleet) (*Policy, error) {
	info, err := lookup(string(t))
	if err != nil {
		return nil, err
	}
	cfg := PolicyConfig{Fleet: fleet}
	if info.NeedsShapes {
		cfg.Shapes = StaticShapes(typical)
	}
	return NewPolicy(t, cfg)
}

// WithFleet is the policy built again with the cluster's GPUs by model as
// f counts them (PolicyConfig.Fleet): a front end builds its policy from
// its args, then hands it the ledger it reads nodes through. A nil policy
// stays nil.
func (p *Policy) WithFleet(f Fleet) *Policy {
	if p == nil {
		return nil
	}
	cfg := p.cfg
	cfg.Fleet = f
	return &Policy{info: p.info, shapes: p.shapes, fleet: f, cfg: cfg, strategy: p.info.build(cfg)}
}

// MustPolicy is NewPolicy for policies known to build, such as a
// registered name with default weights and shapes given; it panics on an
// error. For tests and fixed configurations only.
func MustPolicy(t PolicyType, cfg PolicyConfig) *Policy {
	p, err := NewPolicy(t, cfg)
	if err != nil {
		panic(err)
	}
	return p
}
