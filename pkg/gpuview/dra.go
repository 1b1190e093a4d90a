package gpuview

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// DRA is what a cluster's Dynamic Resource Allocation objects say of its
// GPUs: the ResourceSlices, of which those of Driver publish GPUs, and the
// ResourceClaims, whose allocations hold them. On a node that publishes
// GPUs of the driver the snapshot's GPUs are the published devices and
// their holders the pods the claims are reserved for, as GPUPlacement
// reads them (docs/dra.md); a pending pod's GPU demand is what its claim
// asks (gpu.AskOfClaims), of any model, when its DeviceClass is one of the
// driver's: the class has the driver's name, or a selector of it names the
// driver (as `device.driver == 'gpu.nvidia.com'` in NVIDIA's classes). CEL
// selectors are not evaluated here, where the scheduler evaluates them.
type DRA struct {
	// Driver names the driver whose devices are GPUs; "" for
	// gpu.DefaultDRADriver.
	Driver  string
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Classes []*resourceapi.DeviceClass
}

// draRead is what Build reads of DRA: each node's published GPUs, and the
// claims by namespace and name.
type draRead struct {
	driver      string
	inventories map[string]*gpu.DRAInventory
	claims      map[string]*resourceapi.ResourceClaim
	classes     map[string]*resourceapi.DeviceClass
	allocated   *gpu.DRAAllocated
	// byNode are the allocated claims, by the node whose GPUs they hold.
	byNode map[string][]*resourceapi.ResourceClaim
}

// read reads the slices of the driver, node by node, and the claims.
func (d DRA) read() *draRead {
	r := &draRead{driver: cmp.Or(d.Driver, gpu.DefaultDRADriver), inventories: map[string]*gpu.DRAInventory{},
		claims: map[string]*resourceapi.ResourceClaim{}, classes: map[string]*resourceapi.DeviceClass{}, byNode: map[string][]*resourceapi.ResourceClaim{}}
	for _, c := range d.Classes {
		r.classes[c.Name] = c
	}
	onNode := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range d.Slices {
		if s.Spec.Driver == r.driver && s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			onNode[*s.Spec.NodeName] = append(onNode[*s.Spec.NodeName], s)
		}
	}
	for node, nodeSlices := range onNode {
		inv, _ := gpu.InventoryFromSlices(node, nodeSlices, gpu.DRASource{Driver: r.driver})
		if inv != nil && inv.Inventory != nil && inv.Inventory.Len() > 0 {
			r.inventories[node] = inv
		}
	}
	for _, c := range d.Claims {
		r.claims[c.Namespace+"/"+c.Name] = c
		if node := gpu.DRAHeldNode(c.Status.Allocation, r.driver); node != "" {
			r.byNode[node] = append(r.byNode[node], c)
		}
	}
	r.allocated = gpu.DRAAllocatedBy(d.Claims, r.driver)
	return r
}

// errClaims marks a pod whose claims cannot be read (yet).
var errClaims = errors.New("its ResourceClaims cannot be read")

// view is the node's published GPUs with DRA's allocations counted, or nil
// when the node publishes none.
func (r *draRead) view(node string) *gpu.NodeGPUs {
	if r == nil || r.inventories[node] == nil {
		return nil
	}
	inv := r.inventories[node]
	return gpu.EmptyDRANodeGPUs(node, inv).WithDRA(inv, r.allocated)
}

// demand is what a pod's claims ask of the driver's GPUs, allocated or
// not: zero when it has none the policies read, or its class is not the
// driver's (gpuClass); an error while a claim of it is not made yet or
// cannot be found.
func (r *draRead) demand(p *v1.Pod) (gpu.Demand, error) {
	if r == nil || len(p.Spec.ResourceClaims) == 0 {
		return gpu.Demand{}, nil
	}
	names, made := gpu.ClaimNames(p)
	if !made {
		return gpu.Demand{}, fmt.Errorf("%w: they are not made from their templates yet", errClaims)
	}
	var claims []*resourceapi.ResourceClaim
	for _, name := range names {
		c, ok := r.claims[p.Namespace+"/"+name]
		if !ok {
			return gpu.Demand{}, fmt.Errorf("%w: %s/%s does not exist", errClaims, p.Namespace, name)
		}
		claims = append(claims, c)
	}
	if ask := gpu.AskOfClaims(claims, r.driver); ask != nil && r.gpuClass(ask.Class) {
		return ask.Demand(), nil
	}
	return gpu.Demand{}, nil
}

// gpuClass reports whether a DeviceClass hands out the driver's devices:
// it has the driver's name, or one of its CEL selectors names the driver.
func (r *draRead) gpuClass(name string) bool {
	if name == r.driver {
		return true
	}
	c := r.classes[name]
	if c == nil {
		return false
	}
	for _, sel := range c.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		if expr := sel.CEL.Expression; strings.Contains(expr, "'"+r.driver+"'") || strings.Contains(expr, `"`+r.driver+`"`) {
			return true
		}
	}
	return false
}

// addHolders names the pods that the allocated claims on the node are
// reserved for as holders of the GPUs they take.
func (r *draRead) addHolders(out *Node, pods []*v1.Pod) {
	inv := r.inventories[out.Name]
	byUID := make(map[string]*v1.Pod, len(pods))
	for _, p := range pods {
		byUID[string(p.UID)] = p
	}
	for _, c := range r.byNode[out.Name] {
		for _, use := range gpu.ClaimUses(inv, c, r.driver) {
			for _, ref := range c.Status.ReservedFor {
				if ref.APIGroup != "" || ref.Resource != "pods" {
					continue
				}
				h := Holder{Namespace: c.Namespace, Name: ref.Name, Milli: use.Milli, MemoryMiB: use.MemoryMiB}
				if p := byUID[string(ref.UID)]; p != nil {
					h.Priority = priorityOf(p)
				}
				out.GPUs[use.Pos].Holders = append(out.GPUs[use.Pos].Holders, h)
			}
		}
	}
	for i := range out.GPUs {
		slices.SortFunc(out.GPUs[i].Holders, func(a, b Holder) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
}
