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
// one builds DynamicResources with a DRA manager whose listing of the
// pod's cycle has, for each node, a twin of its slices: a copy whose device
// list this plugin's Filter sets to the node's preferred order just before
// DynamicResources allocates there. GPUPlacement writes its Preferences in
// its PreFilter (WritePreferences), from the same policy that places
// annotation pods; this plugin's PreFilter hands them to the manager for
// DynamicResources' PreFilter, which builds the cycle's allocator from the
// listing, and its Filter asks them for the node's devices, so that the
// policy places the pod on the nodes the scheduler filters only.
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
// start). Without Preferences in the cycle (no GPUPlacement, or a pod whose
// claims the policy does not read) it is DynamicResources, exactly.
package gpudra

import (
	"context"
	"fmt"
	"path"
	"reflect"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
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

// Plugin is DynamicResources with each node's devices listed in the order
// of the cycle's Preferences. Every extension point but PreFilter and
// Filter is DynamicResources' own.
type Plugin struct {
	*dynamicresources.DynamicResources
	manager *orderedManager
	// parallelizer and inFilter arrange the twins (arrangeInFilter).
	parallelizer fwk.Parallelizer
	inFilter     bool
	// cycle keeps one PreFilter at a time on the manager's Preferences.
	cycle sync.Mutex
}

// New builds DynamicResources over the scheduler's DRA manager with the
// cycle's Preferences applied. Its args are DynamicResources' own
// (filterTimeout, bindingTimeout), defaulted as for DynamicResources.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	args, err := argsOf(obj, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	p := &Plugin{parallelizer: h.Parallelizer(), inFilter: arrangeInFilter(ctx, fts)}
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
// cycle's allocator uses, with the manager listing twins of the slices the
// cycle's Preferences may reorder (twinListing), kept for Filter.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	prefs := preferencesOf(state)
	if p.manager == nil || prefs == nil {
		return p.DynamicResources.PreFilter(ctx, state, pod, nodes)
	}
	p.cycle.Lock()
	defer p.cycle.Unlock()
	p.manager.prefs.Store(&prefs)
	defer p.manager.prefs.Store(nil)
	result, status := p.DynamicResources.PreFilter(ctx, state, pod, nodes)
	if twins := p.manager.listed.Swap(nil); twins != nil && status.IsSuccess() {
		twins.prepare(ctx, p.inFilter, nodes, prefs, p.parallelizer)
		state.Write(twinsKey, &cycleTwins{twins: twins, prefs: prefs})
	}
	return result, status
}

// arrangeInFilter reports whether the structured allocator DynamicResources
// builds for the features reads the devices of a slice only when it
// allocates on a node of the slice's pool: the incubating and experimental
// implementations, which take the slices of the node and of its pools.
// Then, where no pool spans nodes, each node's twins are arranged in the
// node's Filter. The stable implementation reads every slice's devices on
// every node, so with it, as with pools that span nodes, every node's
// twins are arranged in PreFilter, before any allocation.
// (TestTwinListingArrangesTheFilteredNodes runs each implementation,
// under -race too.)
func arrangeInFilter(ctx context.Context, fts feature.Features) bool {
	probe, err := structured.NewAllocator(ctx, dynamicresources.AllocatorFeatures(fts), structured.AllocatedState{}, nil, nil, nil)
	if err != nil {
		return false
	}
	t := reflect.TypeOf(probe)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch path.Base(t.PkgPath()) {
	case "incubating", "experimental":
		return true
	}
	return false
}

// Filter is DynamicResources' Filter, with the node's devices listed in
// the preferred order first when the cycle's allocator was built from a
// twin listing.
func (p *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	if data, err := state.Read(twinsKey); err == nil {
		c := data.(*cycleTwins)
		c.twins.arrange(ctx, nodeInfo, c.prefs)
	}
	return p.DynamicResources.Filter(ctx, state, pod, nodeInfo)
}

// twinsKey is where PreFilter leaves the cycle's twin listing.
const twinsKey fwk.StateKey = "Twins" + Name

// cycleTwins is the twin listing the cycle's allocator was built from, and
// the Preferences that arrange it.
type cycleTwins struct {
	twins *twinListing
	prefs Preferences
}

// Clone implements fwk.StateData: the listing is the cycle's allocator's,
// shared by the state's clones.
func (c *cycleTwins) Clone() fwk.StateData { return c }

// withDRAManager is a framework handle with another DRA manager.
type withDRAManager struct {
	fwk.Handle
	manager fwk.SharedDRAManager
}

// SharedDRAManager implements fwk.Handle.
func (h withDRAManager) SharedDRAManager() fwk.SharedDRAManager { return h.manager }
