// Package whatif answers "where would these pods land?": given a cluster's
// nodes and the pods bound to them (a live cluster, or a `kubectl get -o
// yaml` export), extra nodes to add and new pods to submit, it places the
// new pods one at a time, for each policy asked, exactly as gpusched's
// simulator places them with its built-in profile (pkg/simulator,
// default-config.yaml) and the node-order tie-break.
//
// It models that profile's decision and nothing more:
//
//   - feasibility: the engine's GPU fit (gpu.Check), then the kube-scheduler
//     filters NodeUnschedulable, TaintToleration (NoSchedule, NoExecute),
//     NodeAffinity (nodeSelector and required node affinity) and
//     NodeResourcesFit (CPU, memory, ephemeral storage, other scalar
//     resources and the pod count, nvidia.com/gpu ignored), first failure
//     first, as the simulator's GPU screen and the framework order them;
//   - score: the policy's engine score of every feasible node (none when
//     only one is feasible), rescaled to 0..100 as GPUPlacement's
//     NormalizeScore does (gpu.Policy.Rescale); GPUPlacement is the
//     profile's only scorer;
//   - choice: the highest score, ties to the first node in an order of the
//     nodes drawn from Options.Seed, as the simulator's node-order
//     tie-break draws it;
//   - GPUs: the policy's choice on that node (gpu.Policy.Place, as
//     GPUPlacement's Reserve makes it), which is then counted on the node
//     (gpu.NodeGPUs.With), with the pod's CPU and memory, before the next pod.
//
// What the profile's other filters check — inter-pod affinity, topology
// spread, host ports, volumes, DRA claims — is not modeled; nor are
// preemption, gangs (a gang's pods are placed one by one) and scheduling
// gates. Placement.NotModeled names what a pod asks of them.
//
// The package imports only the engine (pkg/gpu), k8s.io/api,
// k8s.io/apimachinery and k8s.io/component-helpers, so a kubectl plugin that
// links it builds in seconds. TestWhatIfAgreesWithSimulate in pkg/simulator
// holds it to the simulator's decisions.
package whatif

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// DefaultPolicy, in Options.Policies, names the engine's default policy
// (gpu.DefaultPolicy), as the simulator's --policies does.
const DefaultPolicy = "default"

// DefaultSeed is the simulator's default seed (its --seeds flag): with it,
// ties are broken as a default simulator run breaks them.
const DefaultSeed int64 = 42

// Input is one what-if question. Run reads it and never changes it.
type Input struct {
	// Nodes are the cluster's nodes.
	Nodes []*v1.Node
	// Pods are the cluster's pods. Those bound to one of Nodes or ExtraNodes
	// (spec.nodeName set) and not terminated (phase Succeeded or Failed)
	// are the live state: they hold the GPUs of their gpusched.io/gpu-assigned
	// annotation and their CPU, memory and other requests on their node. A
	// bound GPU pod without the annotation holds the GPUs best fit would
	// give it, as the scheduler's ledger counts it. Every pod not
	// terminated, bound or pending (but not a pending pod being deleted),
	// is part of the workload whose typical pods fragmentation-aware
	// policies measure against (gpu.WorkloadDemand); a pod that is also
	// among NewPods (by namespace/name) counts once.
	Pods []*v1.Pod
	// ExtraNodes are nodes to add to the cluster, after Nodes.
	ExtraNodes []*v1.Node
	// NewPods are the pods to place, in submission order. Their
	// spec.nodeName is ignored, as the simulator ignores it.
	NewPods []*v1.Pod
}

// Options are how to answer.
type Options struct {
	// Policies are the placement policies to compare: registered names
	// (gpu.PolicyNames) or DefaultPolicy. Empty means every registered
	// policy, in registry order.
	Policies []string
	// Seed draws the node order that breaks ties between equally scored
	// nodes: the permutation the simulator's node-order tie-break draws
	// from the same seed over the same nodes (Nodes, then ExtraNodes).
	// The zero value is seed 0; DefaultSeed matches a default simulator run.
	Seed int64
}

// Result is the outcome of one policy.
type Result struct {
	// Policy is the name as asked; DefaultPolicy shows as "default (PairFit)",
	// as the simulator's reports show it.
	Policy string `json:"policy"`
	// Type is the registered policy that ran.
	Type gpu.PolicyType `json:"type"`
	// Placements are the new pods' outcomes, in submission order.
	Placements []Placement `json:"placements"`
	Summary    Summary     `json:"summary"`
}

// Placement is where one new pod would land, or why it would not.
type Placement struct {
	// Pod is the pod's namespace/name.
	Pod string `json:"pod"`
	// Node is the chosen node; "" when the pod fits nowhere.
	Node string `json:"node,omitempty"`
	// GPUs are the indices of the GPUs it would be given; empty for a pod
	// without GPUs.
	GPUs []int `json:"gpus,omitempty"`
	// Assignment is what GPUPlacement would write in the pod's
	// gpusched.io/gpu-assigned annotation; nil for a pod without GPUs.
	Assignment *gpu.Assignment `json:"-"`
	// Reason is why the pod fits nowhere, as the scheduler's
	// FailedScheduling event says it: "0/12 nodes are available: 3
	// Insufficient cpu, 9 insufficient free GPUs."
	Reason string `json:"reason,omitempty"`
	// Rejected counts the nodes that rejected the pod by reason (a node
	// may give several); set only when the pod fits nowhere.
	Rejected map[string]int `json:"rejected,omitempty"`
	// NotModeled names the pod's constraints that what-if does not check
	// ("inter-pod affinity", "topology spread", ...): a placement of such a
	// pod may not hold.
	NotModeled []string `json:"notModeled,omitempty"`
}

// Placed reports whether the pod would land on a node.
func (p *Placement) Placed() bool { return p.Node != "" }

// Summary is a policy's outcome for the cluster.
type Summary struct {
	Placed   int `json:"placed"`
	Unplaced int `json:"unplaced"`
	// CapacityMilli is the GPU capacity of every node with a readable
	// inventory, extra nodes included, in milli-GPU.
	CapacityMilli int64 `json:"capacityMilli"`
	// AllocatedMilliBefore and After are the milli-GPU allocated before
	// the new pods and once they are placed (each GPU counted up to its
	// capacity); the Pct fields are the same as a percentage of
	// CapacityMilli, rounded to 2 decimals.
	AllocatedMilliBefore int64   `json:"allocatedMilliBefore"`
	AllocatedMilliAfter  int64   `json:"allocatedMilliAfter"`
	AllocatedPctBefore   float64 `json:"allocatedPctBefore"`
	AllocatedPctAfter    float64 `json:"allocatedPctAfter"`
	// FragmentedMilliBefore and After are the cluster's fragmented free
	// milli-GPU (the sum of gpu.NodeGPUs.Fragment over the nodes, measured
	// against the typical pods of the workload, Pods and NewPods, with
	// each node's free CPU), the measure the simulator's curves report.
	FragmentedMilliBefore float64 `json:"fragmentedMilliBefore"`
	FragmentedMilliAfter  float64 `json:"fragmentedMilliAfter"`
	FragmentedPctBefore   float64 `json:"fragmentedPctBefore"`
	FragmentedPctAfter    float64 `json:"fragmentedPctAfter"`
}

// Run answers the question for each policy of opts, in the order asked.
// Malformed input — an unknown policy, a node listed twice, a malformed
// GPU annotation on a new pod or on a bound pod whose GPUs it decides — is
// an error naming the object, the field, the value and what is allowed;
// Run never panics on input. A node whose GPU inventory is malformed is no
// error: like the scheduler, what-if places no GPU pod on it, with the
// reason "node GPU inventory invalid".
func Run(in Input, opts Options) ([]Result, error) {
	policies, err := resolvePolicies(opts.Policies)
	if err != nil {
		return nil, err
	}
	c, err := newCluster(in, opts.Seed)
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(policies))
	for _, p := range policies {
		fleet := c.newFleet()
		policy, err := c.newPolicy(p.typ, fleet)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.name, err)
		}
		out = append(out, c.run(p.name, policy, fleet))
	}
	return out, nil
}

// namedPolicy is a policy as asked and the registered type it resolves to.
type namedPolicy struct {
	name string
	typ  gpu.PolicyType
}

// resolvePolicies checks the policy names and resolves DefaultPolicy.
func resolvePolicies(names []string) ([]namedPolicy, error) {
	if len(names) == 0 {
		names = gpu.PolicyNames()
	}
	var errs []error
	out := make([]namedPolicy, 0, len(names))
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			errs = append(errs, fmt.Errorf("policies[%d]: policy %q is listed twice", i, name))
			continue
		}
		if name == DefaultPolicy {
			out = append(out, namedPolicy{fmt.Sprintf("%s (%s)", DefaultPolicy, gpu.DefaultPolicy), gpu.DefaultPolicy})
			continue
		}
		info, err := gpu.LookupPolicy(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("policies[%d]: %w, or %s", i, err, DefaultPolicy))
			continue
		}
		out = append(out, namedPolicy{name, info.Type})
	}
	return out, errors.Join(errs...)
}

// podName is a pod's namespace/name.
func podName(p *v1.Pod) string {
	if p.Namespace == "" {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}

// fitMessage is why a pod fits none of total nodes, as kube-scheduler's
// FitError (and the simulator) words it: the reasons with their node
// counts, sorted.
func fitMessage(total int, rejected map[string]int) string {
	parts := make([]string, 0, len(rejected))
	for r, n := range rejected {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	slices.Sort(parts)
	return fmt.Sprintf("0/%d nodes are available: %s.", total, strings.Join(parts, ", "))
}
