// Package gpudra is GPUDynamicResources: the in-tree DynamicResources
// plugin, unchanged, allocating from the ResourceSlices with each node's
// devices in the order a placement policy prefers for the pod, so that the
// structured allocator's first fit is the policy's choice.
//
// On a node that publishes its GPUs through DRA, DynamicResources chooses
// the devices of a claim: the structured allocator takes the first devices
// that satisfy it, in the order the driver lists them. No scheduler hook
// scores devices. But the allocator takes its slices from the scheduler's
// DRA manager, and a plugin may be built with a handle of its own: this
// one builds DynamicResources with a DRA manager that lists the slices of
// the pod's cycle with the preferred devices first. GPUPlacement writes the
// preference in its PreFilter (WriteOrder), for every node that publishes
// GPUs, from the same policy that places annotation pods; this plugin's
// PreFilter hands it to the manager for DynamicResources' PreFilter, which
// builds the cycle's allocator, and takes it back after.
//
// Only the order changes. Selectors, CEL, matchAttribute, firstAvailable,
// admin access, device taints, consumable capacity and partitionable
// devices are the allocator's own, as compiled into the scheduler, and the
// allocation it writes names the published devices, which the driver and
// the kubelet read unchanged. Where the policy's choice does not satisfy a
// claim, the allocator goes on to the other devices, first fit.
//
// A profile enables GPUDynamicResources in multiPoint after GPUPlacement
// and disables DynamicResources (docs/dra.md); the two cannot both be
// enabled (they register the same pod index, and the scheduler refuses to
// start). Without an order in the cycle (no GPUPlacement, or a pod whose
// claims the policy does not read) it is DynamicResources, exactly.
package gpudra

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/yaml"
)

// Name is the plugin's name in a scheduler profile.
const Name = "GPUDynamicResources"

// Plugin is DynamicResources with the device order of the cycle's pod.
// Every extension point but PreFilter is DynamicResources' own.
type Plugin struct {
	*dynamicresources.DynamicResources
	manager *orderedManager
	// cycle keeps one PreFilter at a time on the manager's order.
	cycle sync.Mutex
}

// New builds DynamicResources over the scheduler's DRA manager with the
// cycle's device order applied. Its args are DynamicResources' own
// (filterTimeout, bindingTimeout), defaulted as for DynamicResources.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	args, err := argsOf(obj, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	p := &Plugin{}
	handle := h
	if h.SharedDRAManager() != nil {
		p.manager = &orderedManager{SharedDRAManager: h.SharedDRAManager()}
		handle = withDRAManager{Handle: h, manager: p.manager}
	}
	inner, err := dynamicresources.New(ctx, args, handle, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	dr, ok := inner.(*dynamicresources.DynamicResources)
	if !ok {
		return nil, fmt.Errorf("%s: the DynamicResources plugin is a %T, want *dynamicresources.DynamicResources", Name, inner)
	}
	p.DynamicResources = dr
	return p, nil
}

// argsOf is DynamicResources' args from the profile: none (the defaults),
// or the fields of DynamicResourcesArgs, decoded strictly (an unknown or
// misspelt field is an error naming it), defaulted and validated as
// DynamicResources' own.
func argsOf(obj runtime.Object, fts feature.Features) (*schedconfig.DynamicResourcesArgs, error) {
	const allowed = "allowed: DynamicResources' args, filterTimeout and bindingTimeout"
	external := &configv1.DynamicResourcesArgs{}
	args := &schedconfig.DynamicResourcesArgs{}
	switch a := obj.(type) {
	case nil:
	case *schedconfig.DynamicResourcesArgs:
		args = a
	case *runtime.Unknown:
		if err := yaml.UnmarshalStrict(a.Raw, external); err != nil {
			return nil, fmt.Errorf("args: %w (%s)", err, allowed)
		}
	default:
		if err := frameworkruntime.DecodeInto(obj, external); err != nil {
			return nil, fmt.Errorf("args: %w (%s)", err, allowed)
		}
	}
	if _, internal := obj.(*schedconfig.DynamicResourcesArgs); !internal {
		schedscheme.Scheme.Default(external)
		if err := schedscheme.Scheme.Convert(external, args, nil); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	if err := validation.ValidateDynamicResourcesArgs(field.NewPath("args"), args, fts); err != nil {
		return nil, err
	}
	return args, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// PreFilter is DynamicResources' PreFilter, which reads the slices the
// cycle's allocator uses, with the manager listing them in the order
// GPUPlacement wrote for the pod.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if p.manager == nil {
		return p.DynamicResources.PreFilter(ctx, state, pod, nodes)
	}
	p.cycle.Lock()
	defer p.cycle.Unlock()
	if order := orderOf(state); order != nil {
		p.manager.order.Store(&order)
		defer p.manager.order.Store(nil)
	}
	return p.DynamicResources.PreFilter(ctx, state, pod, nodes)
}

// withDRAManager is a framework handle with another DRA manager.
type withDRAManager struct {
	fwk.Handle
	manager fwk.SharedDRAManager
}

// SharedDRAManager implements fwk.Handle.
func (h withDRAManager) SharedDRAManager() fwk.SharedDRAManager { return h.manager }
