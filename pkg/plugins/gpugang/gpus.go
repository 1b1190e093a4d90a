package gpugang

import (
	"cmp"
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// A gang's GPUs are those GPUPlacement places its pods on: on a node whose
// GPUs a DRA driver publishes, the driver's devices with DRA's
// allocations, and a member's demand is what its ResourceClaims ask
// (dragpus, left in the cycle by GPUPlacement's PreFilter, which comes
// before GPUGang's in the profile); elsewhere the node's inventory and
// gpusched's ledger, and the member's annotation or extended resources.

// member is a gang member's GPU demand and where it comes from.
type member struct {
	demand gpu.Demand
	// claims: the demand is the pod's ResourceClaims', which only DRA
	// devices serve.
	claims bool
	// pending: a claim of the pod cannot be read yet (the resourceclaim
	// controller has not made it); demand is then zero.
	pending bool
	// malformed: the pod's annotation or resources are invalid;
	// GPUPlacement reports it on the pod.
	malformed bool
}

// memberOf reads a member's GPU demand: its annotation or extended
// resources (gpu.DemandFromPod) or, when it asks for none that way, what
// its claims ask of the DRA driver's GPUs.
func memberOf(ctx context.Context, dra dragpus.GPUs, pod *v1.Pod) member {
	d, err := gpu.DemandFromPod(pod)
	if err != nil {
		return member{malformed: true}
	}
	if d.IsZero() && dra != nil && len(pod.Spec.ResourceClaims) > 0 {
		claims, pending := dra.ClaimDemand(ctx, pod)
		return member{demand: claims, claims: !claims.IsZero(), pending: pending}
	}
	return member{demand: d}
}

// demandOf is memberOf's demand; ok is false for a malformed one.
func demandOf(ctx context.Context, dra dragpus.GPUs, pod *v1.Pod) (gpu.Demand, bool) {
	m := memberOf(ctx, dra, pod)
	return m.demand, !m.malformed
}

// gangDemands is what a gang's members ask for.
type gangDemands struct {
	// demands are the members' demands in the order of their UIDs (the
	// index returns members in no particular order), malformed ones left
	// out.
	demands []gpu.Demand
	// claims: a member takes GPUs through claims; shares: a member asks
	// gpusched for a share of a GPU, which a DRA node never gives
	// (GPUPlacement's Filter on DRA nodes).
	claims, shares bool
	// pending is a member whose claims cannot be read yet, or nil.
	pending *v1.Pod
}

func demandsOf(ctx context.Context, dra dragpus.GPUs, members []*v1.Pod) gangDemands {
	sorted := slices.SortedFunc(slices.Values(members), func(a, b *v1.Pod) int { return cmp.Compare(a.UID, b.UID) })
	g := gangDemands{demands: make([]gpu.Demand, 0, len(sorted))}
	for _, pod := range sorted {
		m := memberOf(ctx, dra, pod)
		switch {
		case m.malformed:
			continue
		case m.pending && g.pending == nil:
			g.pending = pod
		}
		g.claims = g.claims || m.claims
		g.shares = g.shares || (!m.claims && m.demand.IsShare())
		g.demands = append(g.demands, m.demand)
	}
	return g
}

// mixed reports whether the gang mixes claims and gpusched's shares, which
// no one kind of node serves both of. Such a gang is checked against every
// node (an approximation: a claim cannot go where a share does) and is not
// held to one GPU model, which could be one that only one kind of node has.
func (g gangDemands) mixed() bool { return g.claims && g.shares }

// takes reports whether the node may hold the gang's GPUs: a node whose
// GPUs a DRA driver publishes takes claims, and whole GPUs asked for as
// nvidia.com/gpu where DRA serves that resource (KEP-5004), but never
// gpusched's shares; any other node takes everything but claims.
func (g gangDemands) takes(dra dragpus.GPUs, ni fwk.NodeInfo, onDRA bool) bool {
	switch {
	case g.mixed():
		return true
	case onDRA:
		return g.claims || (!g.shares && dra.ServesGPUResource(ni))
	}
	return !g.claims
}

// clusterOf is the nodes the gang's GPUs may be on (takes), as empty
// copies: the DRA-published GPUs of the nodes that have them, the other
// nodes' Node objects.
func (g gangDemands) clusterOf(dra dragpus.GPUs, nodes []fwk.NodeInfo) gang.Cluster {
	var c gang.Cluster
	for _, ni := range nodes {
		n := ni.Node()
		if n == nil {
			continue
		}
		v := draEmpty(dra, n.Name)
		switch {
		case !g.takes(dra, ni, v != nil):
		case v != nil:
			c.DRA = append(c.DRA, v)
		default:
			c.Nodes = append(c.Nodes, n)
		}
	}
	return c
}

// viewsOf is the nodes the gang's GPUs may be on (takes), with what is
// allocated on them (nodeGPUs).
func (p *GPUGang) viewsOf(g gangDemands, dra dragpus.GPUs, ledger gpuledger.Ledger, nodes []fwk.NodeInfo) []*gpu.NodeGPUs {
	views := make([]*gpu.NodeGPUs, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil && g.takes(dra, ni, draEmpty(dra, n.Name) != nil) {
			views = append(views, p.nodeGPUs(dra, ledger, ni))
		}
	}
	return views
}

// draEmpty is the node's DRA-published GPUs with nothing allocated, or nil.
func draEmpty(dra dragpus.GPUs, node string) *gpu.NodeGPUs {
	if dra == nil {
		return nil
	}
	return dra.EmptyNodeGPUs(node)
}

// nodeGPUs is the node's GPUs with what is allocated on them: the DRA
// driver's when the node publishes them, else the view of ledger, the
// cycle's GPUPlacement ledger (gpuledger), whose inventory is parsed once
// per node version and which counts the pods in flight. Only in a profile
// without GPUPlacement (ledger nil) does the plugin read the node's pods
// into a ledger of its own.
func (p *GPUGang) nodeGPUs(dra dragpus.GPUs, ledger gpuledger.Ledger, ni fwk.NodeInfo) *gpu.NodeGPUs {
	node := ni.Node()
	if dra != nil {
		if v := dra.NodeGPUs(node.Name); v != nil {
			return v
		}
	}
	if ledger != nil {
		return ledger.NodeView(ni)
	}
	return p.ownLedger().Node(node, ni.GetGeneration(), podsOf(ni))
}

// ownLedger is the plugin's own ledger, made on first use.
func (p *GPUGang) ownLedger() *gpu.Ledger {
	p.ledgerOnce.Do(func() {
		if p.ledger == nil {
			p.ledger = gpu.NewLedger()
		}
	})
	return p.ledger
}
