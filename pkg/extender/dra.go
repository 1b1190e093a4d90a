package extender

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// The extender gives no GPU by annotation on a node whose GPUs a DRA
// driver hands out, as GPUPlacement does not (docs/dra.md, "Nodes that
// publish both ways"): an annotation would book a GPU that DRA also
// allocates, and neither would see the other's. It has no DRA allocator,
// so it does not place claims; it only keeps GPU pods off such nodes, with
// the reason gpu.ReasonDRAManaged.

// draNodes is which nodes' GPUs a DRA driver hands out: the nodes whose
// ResourceSlices publish devices of the driver, and the nodes on which an
// allocated ResourceClaim holds devices of the driver (gpu.DRAHeldNode:
// a driver upgrade deletes and re-creates the slices while claims run).
// Safe for concurrent use: managed is rebuilt on each change and read
// without a lock.
type draNodes struct {
	driver string

	mu sync.Mutex
	// slices maps a ResourceSlice's name to the node it publishes devices
	// of the driver on; claims maps an allocated claim to its node.
	slices map[string]string
	claims map[types.UID]string

	managed atomic.Pointer[sets.Set[string]]
}

func newDRANodes(driver string) *draNodes {
	d := &draNodes{driver: driver, slices: map[string]string{}, claims: map[types.UID]string{}}
	d.managed.Store(&sets.Set[string]{})
	return d
}

// has reports whether the driver hands out the node's GPUs.
func (d *draNodes) has(node string) bool { return d.managed.Load().Has(node) }

func (d *draNodes) onSlice(obj any) {
	slice, ok := obj.(*resourceapi.ResourceSlice)
	if !ok {
		return
	}
	node := ""
	if s := &slice.Spec; s.Driver == d.driver && s.NodeName != nil && len(s.Devices) > 0 {
		node = *s.NodeName
	}
	d.update(func() { setOrDelete(d.slices, slice.Name, node) })
}

func (d *draNodes) onSliceDelete(obj any) {
	if slice, ok := deleted[*resourceapi.ResourceSlice](obj); ok {
		d.update(func() { delete(d.slices, slice.Name) })
	}
}

func (d *draNodes) onClaim(obj any) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	node := gpu.DRAHeldNode(claim.Status.Allocation, d.driver)
	d.update(func() { setOrDelete(d.claims, claim.UID, node) })
}

func (d *draNodes) onClaimDelete(obj any) {
	if claim, ok := deleted[*resourceapi.ResourceClaim](obj); ok {
		d.update(func() { delete(d.claims, claim.UID) })
	}
}

// update applies change and rebuilds managed.
func (d *draNodes) update(change func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	change()
	next := sets.New[string]()
	for _, node := range d.slices {
		next.Insert(node)
	}
	for _, node := range d.claims {
		next.Insert(node)
	}
	d.managed.Store(&next)
}

func setOrDelete[K comparable](m map[K]string, key K, value string) {
	if value == "" {
		delete(m, key)
		return
	}
	m[key] = value
}

// WatchDRA makes the view track which nodes' GPUs the DRA driver hands
// out (DRAManaged), from the factory's ResourceSlice and ResourceClaim
// informers (resource.k8s.io/v1); HasSynced then waits for them too. Call
// it before the factory starts.
func (c *Cluster) WatchDRA(factory informers.SharedInformerFactory, driver string) error {
	d := newDRANodes(driver)
	sliceReg, err := factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onSlice,
		UpdateFunc: func(_, obj any) { d.onSlice(obj) },
		DeleteFunc: d.onSliceDelete,
	})
	if err != nil {
		return fmt.Errorf("watching ResourceSlices: %w", err)
	}
	claimReg, err := factory.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onClaim,
		UpdateFunc: func(_, obj any) { d.onClaim(obj) },
		DeleteFunc: d.onClaimDelete,
	})
	if err != nil {
		return fmt.Errorf("watching ResourceClaims: %w", err)
	}
	c.dra = d
	c.synced = append(c.synced, sliceReg.HasSynced, claimReg.HasSynced)
	return nil
}

// DRAManaged reports whether a DRA driver hands out the node's GPUs (see
// WatchDRA); always false when the view does not watch DRA.
func (c *Cluster) DRAManaged(node string) bool { return c.dra != nil && c.dra.has(node) }

// servesDRA reports whether the API server serves ResourceSlices and
// ResourceClaims of resource.k8s.io/v1. A server that does not serve the
// group version has no DRA devices; any other error is returned, so that
// a failed discovery does not leave DRA nodes untracked.
func servesDRA(client discovery.DiscoveryInterface) (bool, error) {
	list, err := client.ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", resourceapi.SchemeGroupVersion, err)
	}
	found := sets.New[string]()
	for _, r := range list.APIResources {
		found.Insert(r.Name)
	}
	if !found.HasAll("resourceslices", "resourceclaims") {
		return false, errors.New(resourceapi.SchemeGroupVersion.String() + " is served without resourceslices and resourceclaims")
	}
	return true, nil
}
