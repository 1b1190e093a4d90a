// Package gpuresourcesfit is GPUResourcesFit, NodeResourcesFit's Filter for
// a profile whose GPUs GPUPlacement accounts: it decides exactly as
// NodeResourcesFit with ignoredResources [nvidia.com/gpu,
// gpusched.io/gpu-milli, gpusched.io/gpu-memory-mib] (gpu.DemandResources; it runs
// NodeResourcesFit's own code), without the per-node cost NodeResourcesFit
// pays for an ignored resource.
//
// NodeResourcesFit checks every extended resource a pod asks for against
// every node, and decides whether the resource is ignored only after
// validating its name with a regular expression (IsExtendedResourceName),
// once per resource per node per pod: at 5000 nodes, 5000 validations of
// "nvidia.com/gpu" for every whole-GPU pod, a few percent of the
// scheduler's CPU in the scheduler_perf profiles (docs/benchmarks.md). Both
// the stock scheduler and a gpusched profile that hands nvidia.com/gpu to
// GPUPlacement pay it, for a check whose answer is always "skip".
//
// GPUResourcesFit hands NodeResourcesFit's PreFilter a copy of the pod
// without the resources GPUPlacement accounts, so its per-pod request holds
// nothing to skip; its Filter, queueing hints and pod signature are
// NodeResourcesFit's, unchanged. A profile enables it in multiPoint before
// GPUPlacement, disables NodeResourcesFit at preFilter and filter, and keeps
// NodeResourcesFit for scoring, as examples/gpusched-config.yaml does. Each
// node gets the same verdict; only the order of the Filter plugins differs:
// GPUResourcesFit runs after the other default filters (volumes, topology
// spread, inter-pod affinity; most skip a pod without such constraints at
// PreFilter), so a node that fails one of them and the resource check
// reports that plugin's reason where it reported "Insufficient cpu". It
// takes no args: a profile that makes NodeResourcesFit ignore other
// resources as well keeps NodeResourcesFit.
//
// One check is added to NodeResourcesFit's: on a node whose kubelet
// advertises gpusched.io/gpu-milli (the node agent's shares device plugin),
// the pod's share asked for as that resource must fit the node's
// allocatable, as the kubelet will check it (Advertised).
package gpuresourcesfit

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/noargs"
)

// Name is the plugin's name in a scheduler profile.
const Name = "GPUResourcesFit"

// Ignored are the resources GPUPlacement accounts GPU by GPU, which
// NodeResourcesFit must leave alone: whole GPUs and the quota-counted form
// of shares, which nodes need not advertise.
var Ignored = gpu.DemandResources

// GPUResourcesFit is NodeResourcesFit's PreFilter and Filter without the
// resources in Ignored.
type GPUResourcesFit struct {
	fit fitPlugin
}

// fitPlugin is what GPUResourcesFit uses of NodeResourcesFit.
type fitPlugin interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.EnqueueExtensions
	fwk.SignPlugin
}

var (
	_ fwk.PreFilterPlugin   = &GPUResourcesFit{}
	_ fwk.FilterPlugin      = &GPUResourcesFit{}
	_ fwk.EnqueueExtensions = &GPUResourcesFit{}
	_ fwk.SignPlugin        = &GPUResourcesFit{}
)

// New builds the plugin; it takes no args.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if err := noargs.Check(Name, obj, fmt.Sprintf("it ignores %v, which GPUPlacement accounts; "+
		"a profile that ignores other resources as well keeps NodeResourcesFit", Ignored)); err != nil {
		return nil, err
	}
	return newWithFeatures(ctx, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
}

func newWithFeatures(ctx context.Context, h fwk.Handle, fts feature.Features) (*GPUResourcesFit, error) {
	ignored := make([]string, len(Ignored))
	for i, r := range Ignored {
		ignored[i] = string(r)
	}
	args := &schedconfig.NodeResourcesFitArgs{
		IgnoredResources: ignored,
		// Unused (GPUResourcesFit does not score), but NodeResourcesFit
		// needs a valid one: its default.
		ScoringStrategy: &schedconfig.ScoringStrategy{Type: schedconfig.LeastAllocated, Resources: []schedconfig.ResourceSpec{
			{Name: string(v1.ResourceCPU), Weight: 1}, {Name: string(v1.ResourceMemory), Weight: 1}}},
	}
	p, err := noderesources.NewFit(ctx, args, h, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &GPUResourcesFit{fit: p.(fitPlugin)}, nil
}

// Name implements fwk.Plugin.
func (p *GPUResourcesFit) Name() string { return Name }

// PreFilter is NodeResourcesFit's, on the pod without the Ignored resources.
// It also notes, once per cycle, what the pod requests of Advertised.
func (p *GPUResourcesFit) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if requests(pod, Advertised) {
		want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[Advertised]
		state.Write(advertisedKey, advertisedRequest(want.Value()))
	}
	return p.fit.PreFilter(ctx, state, withoutIgnored(pod), nodes)
}

// PreFilterExtensions implements fwk.PreFilterPlugin: none, as NodeResourcesFit.
func (p *GPUResourcesFit) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter is NodeResourcesFit's, then the kubelet's own check of the
// shares a node advertises (Advertised).
func (p *GPUResourcesFit) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	if s := p.fit.Filter(ctx, state, pod, nodeInfo); !s.IsSuccess() {
		return s
	}
	return advertisedFits(state, nodeInfo)
}

// Advertised is the share resource a node's kubelet may count itself: the
// node agent's shares device plugin advertises it, 1000 per GPU, and the
// kubelet then refuses a pod whose share the node's allocatable no longer
// covers. GPUPlacement's GPU-by-GPU accounting keeps the node's shares
// within its GPUs, but allocatable drops to 0 while the plugin is
// unregistered (an agent or kubelet restart), and a pod bound then would
// fail at the kubelet for good. (What-if checks it alike.)
const Advertised = gpu.ResourceMilli

// advertisedKey holds the pod's request of Advertised in the cycle state,
// when it has one.
const advertisedKey fwk.StateKey = Name + "/advertised"

// advertisedRequest is what the pod requests of Advertised.
type advertisedRequest int64

// Clone implements fwk.StateData; the value never changes.
func (r advertisedRequest) Clone() fwk.StateData { return r }

// advertisedFits refuses a node that advertises Advertised when what its
// pods request of it and the pod's request (noted by PreFilter) come to
// more than its allocatable, with NodeResourcesFit's reason; a node that
// does not advertise it is left to GPUPlacement alone.
func advertisedFits(state fwk.CycleState, nodeInfo fwk.NodeInfo) *fwk.Status {
	allocatable, ok := nodeInfo.GetAllocatable().GetScalarResources()[Advertised]
	if !ok {
		return nil
	}
	data, err := state.Read(advertisedKey)
	if err != nil {
		return nil // the pod asks for none
	}
	want, _ := data.(advertisedRequest)
	used := nodeInfo.GetRequested().GetScalarResources()[Advertised]
	if used+int64(want) > allocatable {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Insufficient %s", Advertised))
	}
	return nil
}

// requests reports whether a container of the pod asks for name.
func requests(pod *v1.Pod, name v1.ResourceName) bool {
	in := func(cs []v1.Container) bool {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[name]; ok {
				return true
			}
			if _, ok := cs[i].Resources.Requests[name]; ok {
				return true
			}
		}
		return false
	}
	return in(pod.Spec.Containers) || in(pod.Spec.InitContainers)
}

// EventsToRegister is NodeResourcesFit's.
func (p *GPUResourcesFit) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	return p.fit.EventsToRegister(ctx)
}

// SignPod is NodeResourcesFit's, on the whole pod: pods that differ only in
// their GPUs sign differently, as GPUPlacement needs.
func (p *GPUResourcesFit) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return p.fit.SignPod(ctx, pod)
}

// withoutIgnored returns pod itself when it asks for none of the Ignored
// resources, else a copy without their requests and limits: in its
// containers, init containers, pod-level resources and overhead.
func withoutIgnored(pod *v1.Pod) *v1.Pod {
	if !asksFor(pod) {
		return pod
	}
	out := pod.DeepCopy()
	strip := func(r *v1.ResourceRequirements) {
		for _, name := range Ignored {
			delete(r.Requests, name)
			delete(r.Limits, name)
		}
	}
	for i := range out.Spec.Containers {
		strip(&out.Spec.Containers[i].Resources)
	}
	for i := range out.Spec.InitContainers {
		strip(&out.Spec.InitContainers[i].Resources)
	}
	if out.Spec.Resources != nil {
		strip(out.Spec.Resources)
	}
	for _, name := range Ignored {
		delete(out.Spec.Overhead, name)
	}
	return out
}

// asksFor reports whether the pod's spec names an Ignored resource.
func asksFor(pod *v1.Pod) bool {
	has := func(l v1.ResourceList) bool {
		for _, name := range Ignored {
			if _, ok := l[name]; ok {
				return true
			}
		}
		return false
	}
	in := func(r *v1.ResourceRequirements) bool { return r != nil && (has(r.Requests) || has(r.Limits)) }
	for i := range pod.Spec.Containers {
		if in(&pod.Spec.Containers[i].Resources) {
			return true
		}
	}
	for i := range pod.Spec.InitContainers {
		if in(&pod.Spec.InitContainers[i].Resources) {
			return true
		}
	}
	return in(pod.Spec.Resources) || has(pod.Spec.Overhead)
}
