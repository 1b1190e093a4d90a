package simulator

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// draManager is the DRA state of one simulated run, in memory: what the
// scheduler's shared DRA manager reads from informers in a cluster. The
// slices and the class are fixed; claims are added with their pods, become
// pending when DynamicResources reserves devices for them, allocated when
// the run binds the pod (commit), and free again when it departs (release).
// Safe for concurrent use (Filter and Score run in parallel over nodes).
type draManager struct {
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass

	mu      sync.RWMutex
	claims  map[string]*resourceapi.ResourceClaim // by namespace/name
	pending map[types.UID]*resourceapi.ResourceClaim
	// state is the allocated state: the devices of every allocated or
	// pending claim. It is kept up to date as allocations come and go
	// (count), since both the DynamicResources plugin and GPUPlacement ask
	// for it in every cycle, and handed out as it is (GatherAllocatedState).
	state *structured.AllocatedState
}

var _ fwk.SharedDRAManager = (*draManager)(nil)

func newDRAManager(slices []*resourceapi.ResourceSlice) *draManager {
	return &draManager{
		slices:  slices,
		classes: []*resourceapi.DeviceClass{draDeviceClass()},
		claims:  map[string]*resourceapi.ResourceClaim{},
		pending: map[types.UID]*resourceapi.ResourceClaim{},
		state: &structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
	}
}

func claimKey(namespace, name string) string { return namespace + "/" + name }

// add makes a pod's claim known, unallocated. A claim of the same name
// that it replaces gives back what it held (pods of the same name).
func (m *draManager) add(claim *resourceapi.ResourceClaim) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := claimKey(claim.Namespace, claim.Name)
	if old := m.claims[key]; old != nil {
		m.count(old.Status.Allocation, false)
		if pending := m.pending[old.UID]; pending != nil {
			m.count(pending.Status.Allocation, false)
			delete(m.pending, old.UID)
		}
	}
	m.claims[key] = claim
}

// commit turns the pending allocations of the pod's claims into
// allocations reserved for the pod, as the DynamicResources plugin's
// PreBind writes them in a cluster, and returns the GPUs they give.
func (m *draManager) commit(pod *v1.Pod) (gpu.Assignment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out gpu.Assignment
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName == nil {
			continue
		}
		key := claimKey(pod.Namespace, *pc.ResourceClaimName)
		claim := m.claims[key]
		if claim == nil {
			return gpu.Assignment{}, fmt.Errorf("pod %s: claim %s does not exist", pod.Name, key)
		}
		pending := m.pending[claim.UID]
		if pending == nil || pending.Status.Allocation == nil {
			return gpu.Assignment{}, fmt.Errorf("pod %s: claim %s has no pending allocation", pod.Name, key)
		}
		delete(m.pending, claim.UID) // its devices stay counted, now as the claim's
		allocated := claim.DeepCopy()
		allocated.Status.Allocation = pending.Status.Allocation.DeepCopy()
		allocated.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		m.claims[key] = allocated
		a, err := draAssignment(allocated.Status.Allocation)
		if err != nil {
			return gpu.Assignment{}, fmt.Errorf("pod %s: claim %s: %w", pod.Name, key, err)
		}
		out.Milli = a.Milli
		out.Devices = append(out.Devices, a.Devices...)
	}
	return out, nil
}

// claimSpecs is the spec of each of the pod's claims, for the Filter memo
// (nodeMemo) to key the pod by what it claims rather than by the names of
// its claims. False when a claim cannot stand for its name: it does not
// exist, is allocated already, or has a request with a list of
// alternatives, whose allocation DynamicResources' Score reads from the
// node's Filter.
func (m *draManager) claimSpecs(pod *v1.Pod) ([]resourceapi.ResourceClaimSpec, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]resourceapi.ResourceClaimSpec, 0, len(pod.Spec.ResourceClaims))
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName == nil {
			return nil, false
		}
		claim := m.claims[claimKey(pod.Namespace, *pc.ResourceClaimName)]
		if claim == nil || claim.Status.Allocation != nil || m.pending[claim.UID] != nil {
			return nil, false
		}
		for _, r := range claim.Spec.Devices.Requests {
			if r.Exactly == nil {
				return nil, false
			}
		}
		out = append(out, claim.Spec)
	}
	return out, true
}

// release deallocates the pod's claims: it has departed.
func (m *draManager) release(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName == nil {
			continue
		}
		if claim := m.claims[claimKey(pod.Namespace, *pc.ResourceClaimName)]; claim != nil {
			free := claim.DeepCopy()
			free.Status = resourceapi.ResourceClaimStatus{}
			m.count(claim.Status.Allocation, false)
			m.claims[claimKey(pod.Namespace, *pc.ResourceClaimName)] = free
		}
	}
}

// ResourceClaims implements fwk.SharedDRAManager.
func (m *draManager) ResourceClaims() fwk.ResourceClaimTracker { return (*draClaims)(m) }

// ResourceSlices implements fwk.SharedDRAManager; the run has no device taints.
func (m *draManager) ResourceSlices() fwk.ResourceSliceLister { return draSlices{m.slices} }

// DeviceClasses implements fwk.SharedDRAManager.
func (m *draManager) DeviceClasses() fwk.DeviceClassLister { return draClasses{m.classes} }

// DeviceClassResolver implements fwk.SharedDRAManager: no class maps an
// extended resource, since every GPU request is a claim.
func (m *draManager) DeviceClassResolver() fwk.DeviceClassResolver { return noExtendedResources{} }

type draSlices struct{ slices []*resourceapi.ResourceSlice }

func (l draSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return l.slices, nil
}

type draClasses struct{ classes []*resourceapi.DeviceClass }

func (l draClasses) List() ([]*resourceapi.DeviceClass, error) { return l.classes, nil }

func (l draClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l.classes {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

type noExtendedResources struct{}

func (noExtendedResources) GetDeviceClass(v1.ResourceName) *resourceapi.DeviceClass { return nil }

// draClaims is the run's claims as the scheduler's claim tracker.
type draClaims draManager

func (c *draClaims) List() ([]*resourceapi.ResourceClaim, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*resourceapi.ResourceClaim, 0, len(c.claims))
	for _, claim := range c.claims {
		out = append(out, claim)
	}
	return out, nil
}

func (c *draClaims) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if claim := c.claims[claimKey(namespace, name)]; claim != nil {
		return claim, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

func (c *draClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	st, err := c.GatherAllocatedState()
	if err != nil {
		return nil, err
	}
	return st.AllocatedDevices, nil
}

// GatherAllocatedState is every device allocated to a claim or pending for
// one: taken whole, or shared with the capacity the shares consume. It is
// the manager's own state, not a copy, and readers must not modify it. It
// changes only between scheduling cycles (commit, release) and in Reserve
// and Unreserve, after Filter and Score have read it: the DynamicResources
// plugin's allocator and GPUPlacement read it within the cycle that asked
// for it. Kept up to date rather than recomputed or copied for each
// reader, since both were most of the DRA path's time outside Filter.
func (c *draClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.state, nil
}

// count adds the devices an allocation takes to the allocated state, or
// takes them out of it (add false); the caller holds m.mu. A device taken
// whole belongs to one allocation; shares are told apart by their share
// IDs, and the memory they consume adds up per device.
func (m *draManager) count(alloc *resourceapi.AllocationResult, add bool) {
	if alloc == nil {
		return
	}
	st := m.state
	for _, r := range alloc.Devices.Results {
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		switch {
		case r.ShareID == nil && add:
			st.AllocatedDevices.Insert(id)
		case r.ShareID == nil:
			st.AllocatedDevices.Delete(id)
		case add:
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		default:
			st.AllocatedSharedDeviceIDs.Delete(structured.MakeSharedDeviceID(id, r.ShareID))
		}
		if r.ShareID == nil || r.ConsumedCapacity == nil {
			continue
		}
		if consumed := structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity); add {
			st.AggregatedCapacity.Insert(consumed)
		} else {
			st.AggregatedCapacity.Remove(consumed)
		}
	}
}

func (c *draClaims) SignalClaimPendingAllocation(uid types.UID, allocated *resourceapi.ResourceClaim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pending[uid]; old != nil {
		(*draManager)(c).count(old.Status.Allocation, false)
	}
	c.pending[uid] = allocated
	(*draManager)(c).count(allocated.Status.Allocation, true)
	return nil
}

func (c *draClaims) GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if claim := c.pending[uid]; claim != nil {
		return claim.Status.Allocation
	}
	return nil
}

func (c *draClaims) MaybeRemoveClaimPendingAllocation(uid types.UID, _ bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	claim, ok := c.pending[uid]
	if ok {
		delete(c.pending, uid)
		(*draManager)(c).count(claim.Status.Allocation, false)
	}
	return ok
}

// AssumeClaimAfterAPICall and AssumedClaimRestore are for the API writes of
// PreBind, which a simulated run does not make (commit stands for them).
func (c *draClaims) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error { return nil }

func (c *draClaims) AssumedClaimRestore(string, string) {}
