package extender

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// Safe for concurrent use. Each event costs a few map operations, so the
// initial lists of a large cluster are read in linear time.
type draNodes struct {
	driver string

	mu sync.RWMutex
	// slices maps a ResourceSlice's name to the node it publishes devices
	// of the driver on; claims maps an allocated claim to its node.
	slices map[string]string
	claims map[types.UID]string
	// holders counts the slices and claims of each node in them.
	holders map[string]int
	// published holds each node's slices of the driver by name, and gpus
	// the GPUs they publish (gpu.InventoryFromSlices, as GPUPlacement reads
	// them), for the cluster's maxima.
	published map[string]map[string]*resourceapi.ResourceSlice
	gpus      map[string]int
}

func newDRANodes(driver string) *draNodes {
	return &draNodes{driver: driver, slices: map[string]string{}, claims: map[types.UID]string{}, holders: map[string]int{},
		published: map[string]map[string]*resourceapi.ResourceSlice{}, gpus: map[string]int{}}
}

// maxGPUs is the most GPUs the driver publishes on any node.
func (d *draNodes) maxGPUs() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := 0
	for _, n := range d.gpus {
		out = max(out, n)
	}
	return out
}

// publish records slice (nil: none) as the one named name, on node ("" for
// none), and counts again the GPUs of the node it left and the node it is
// on; changed reports whether a node's count changed. Callers hold the lock.
func (d *draNodes) publish(name, node string, slice *resourceapi.ResourceSlice) (changed bool) {
	old := d.slices[name]
	if old != "" {
		delete(d.published[old], name)
	}
	if node != "" {
		if d.published[node] == nil {
			d.published[node] = map[string]*resourceapi.ResourceSlice{}
		}
		d.published[node][name] = slice
	}
	for _, n := range []string{old, node} {
		if n != "" && d.countGPUs(n) {
			changed = true
		}
	}
	move(d.slices, name, node, d.holders)
	return changed
}

// countGPUs counts the GPUs the node's slices publish, and reports whether
// the count changed. Callers hold the lock.
func (d *draNodes) countGPUs(node string) bool {
	before, had := d.gpus[node]
	byName := d.published[node]
	if len(byName) == 0 {
		delete(d.published, node)
		delete(d.gpus, node)
		return had
	}
	list := make([]*resourceapi.ResourceSlice, 0, len(byName))
	for _, s := range byName {
		list = append(list, s)
	}
	n := 0
	if inv, _ := gpu.InventoryFromSlices(node, list, gpu.DRASource{Driver: d.driver}); inv != nil {
		n = inv.Inventory.Len()
	}
	d.gpus[node] = n
	return !had || n != before
}

// has reports whether the driver hands out the node's GPUs.
func (d *draNodes) has(node string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.holders[node] > 0
}

// onSlice records the node a slice of the driver publishes devices on,
// devices or not: GPUPlacement counts a node with an empty slice of the
// driver as DRA's too.
// onSlice records a slice added or changed; changed reports whether a
// node's count of published GPUs changed.
func (d *draNodes) onSlice(obj any) (changed bool) {
	slice, ok := obj.(*resourceapi.ResourceSlice)
	if !ok {
		return false
	}
	node := ""
	if s := &slice.Spec; s.Driver == d.driver && s.NodeName != nil {
		node = *s.NodeName
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.publish(slice.Name, node, slice)
}

func (d *draNodes) onSliceDelete(obj any) (changed bool) {
	if slice, ok := deleted[*resourceapi.ResourceSlice](obj); ok {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.publish(slice.Name, "", nil)
	}
	return false
}

func (d *draNodes) onClaim(obj any) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	node := gpu.DRAHeldNode(claim.Status.Allocation, d.driver)
	d.mu.Lock()
	defer d.mu.Unlock()
	move(d.claims, claim.UID, node, d.holders)
}

func (d *draNodes) onClaimDelete(obj any) {
	if claim, ok := deleted[*resourceapi.ResourceClaim](obj); ok {
		d.mu.Lock()
		defer d.mu.Unlock()
		move(d.claims, claim.UID, "", d.holders)
	}
}

// move records that key now holds node ("" for none), counting the change
// in holders. Callers hold the lock.
func move[K comparable](m map[K]string, key K, node string, holders map[string]int) {
	old := m[key]
	if old == node {
		return
	}
	if old != "" {
		if holders[old]--; holders[old] <= 0 {
			delete(holders, old)
		}
	}
	if node == "" {
		delete(m, key)
		return
	}
	m[key] = node
	holders[node]++
}

// WatchDRA makes the view track which nodes' GPUs the DRA driver hands
// out (DRAManaged), from the factory's ResourceSlice and ResourceClaim
// informers (resource.k8s.io/v1); HasSynced then waits for them too. Call
// it before the factory starts.
func (c *Cluster) WatchDRA(factory informers.SharedInformerFactory, driver string) error {
	d := newDRANodes(driver)
	// A slice that changes the GPUs its node publishes changes the
	// cluster's maxima, as a Node object does.
	changed := func(yes bool) {
		if yes {
			c.nodeChanges.Add(1)
		}
	}
	sliceReg, err := factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(d.onSlice(obj)) },
		UpdateFunc: func(_, obj any) { changed(d.onSlice(obj)) },
		DeleteFunc: func(obj any) { changed(d.onSliceDelete(obj)) },
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

// markDRA sets each candidate's dra under one read lock: a request names
// thousands of nodes, read in parallel.
func (c *Cluster) markDRA(cands []candidate) {
	if c.dra == nil {
		return
	}
	c.dra.mu.RLock()
	defer c.dra.mu.RUnlock()
	for i := range cands {
		cands[i].dra = c.dra.holders[cands[i].name] > 0
	}
}

// servesDRA reports whether the API server serves ResourceSlices and
// ResourceClaims of resource.k8s.io/v1. A server without the group has no
// DRA devices. A server that serves DRA only in a beta version (1.32,
// 1.33) is an error: the extender could not see the nodes whose GPUs DRA
// hands out and might give one of them by annotation too; so is any other
// failed discovery, so that it does not leave DRA nodes untracked.
func servesDRA(client discovery.DiscoveryInterface) (bool, error) {
	list, err := client.ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		groups, gerr := client.ServerGroups()
		if gerr != nil {
			return false, fmt.Errorf("discovering API groups: %w", gerr)
		}
		for _, g := range groups.Groups {
			if g.Name == resourceapi.GroupName {
				return false, fmt.Errorf("the API server serves %s only as %s, not %s: the extender cannot see which nodes' GPUs DRA hands out; "+
					"set dra.enabled: false in --placement-args if no DRA driver publishes GPUs in this cluster", resourceapi.GroupName, versionsOf(g), resourceapi.SchemeGroupVersion.Version)
			}
		}
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

func versionsOf(g metav1.APIGroup) string {
	var out []string
	for _, v := range g.Versions {
		out = append(out, v.Version)
	}
	return strings.Join(out, ", ")
}
