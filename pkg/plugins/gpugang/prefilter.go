package gpugang

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// PreFilter hands the plugin's view of gangs to the cycle's other plugins
// (gangview), then admits a gang pod to this cycle, or says why its gang cannot be
// placed yet; a pod outside any gang skips the plugin. Every refusal is
// UnschedulableAndUnresolvable (preemption cannot help) with a message naming
// the gang, and the pod is tried again when its gang changes:
//   - the pod-group label is not a PodGroup name;
//   - the PodGroup CRD is not installed, the PodGroup does not exist, or
//     its spec is invalid (minMember ≤ 0);
//   - fewer than minMember pods of the gang exist;
//   - the gang does not fit the cluster even with every GPU free.
//
// A pod refused for missing members has its PodGroup's status written
// (Pending) before PreFilter returns, so the status is there when the
// refusal's FailedScheduling event is. For an admitted pod that asks for
// GPUs, PreFilter also decides the GPU models it may use (gangModels), which
// Filter enforces.
func (p *GPUGang) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	gangview.Write(state, p)
	p.activate()
	if gpuledger.Read(state) == nil {
		p.orderWarning.Do(func() {
			logger(ctx).Error(nil, "No GPUPlacement ran before GPUGang in this profile: gangs are checked against GPUGang's own reading of the nodes' GPUs, without the pods in flight; list GPUPlacement before GPUGang", "profile", p.profile)
		})
	}
	name, ok, err := podgroup.NameOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	key := groupKey(pod.Namespace, name)
	obj := p.podGroup(pod.Namespace, name)
	if obj == nil && !p.served.Load() {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"label %s names PodGroup %s, and the API server serves no PodGroups (%s): install the PodGroup CRD (deploy/crds) or remove the label",
			podgroup.LabelPodGroup, key, podgroup.Resource.GroupVersion().String()))
	}
	if obj == nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"label %s names PodGroup %s, which does not exist: create it (%s/%s) or remove the label",
			podgroup.LabelPodGroup, key, podgroup.Group+"/"+podgroup.Version, podgroup.Kind))
	}
	pg, err := podgroup.FromUnstructured(obj)
	if err == nil {
		err = pg.Validate()
	}
	if err != nil {
		p.reportOnce(obj, v1.EventTypeWarning, "InvalidPodGroup", err.Error())
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	minMember := int(pg.Spec.MinMember)
	members := p.members(key)
	if len(members) < minMember {
		// The status says Pending before the FailedScheduling event that
		// this refusal becomes is recorded (docs/gang.md, Status).
		p.status.writeNow(ctx, key)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"gang %s has %d of the %d pods its spec.minMember asks for; waiting for the rest", key, len(members), minMember))
	}
	dra := dragpus.Read(state)
	demands := demandsOf(ctx, dra, members)
	if demands.pending != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"gang %s: waiting for the ResourceClaims of pod %s, which the resourceclaim controller makes from its templates", key, klog.KObj(demands.pending)))
	}
	fit := p.fitEmpty(key, demands, nodes, minMember, dra)
	if !fit.fit.Fits() {
		msg := fmt.Sprintf("gang %s: %s", key, fit.fit.Reason())
		p.reportOnce(obj, v1.EventTypeWarning, "GangTooLarge", msg)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	timeout := time.Duration(p.args.ScheduleTimeoutSeconds) * time.Second
	if t := pg.Spec.ScheduleTimeoutSeconds; t != nil {
		timeout = time.Duration(*t) * time.Second
	}
	mixed, _ := pg.MixedModels() // validated above
	var models []string
	if d, ok := demandOf(ctx, dra, pod); ok && !d.IsZero() && !demands.mixed() {
		models = p.gangModels(ctx, key, obj, mixed, fit.byModel, nodes, dra, gpuledger.Read(state), demands)
	}
	state.Write(stateKey, &gangState{key: key, object: obj, minMember: minMember, timeout: timeout, models: models})
	return nil, nil
}

// fitEmpty places the members' GPU demands on empty copies of the nodes
// their GPUs may be on (gangDemands.clusterOf: a DRA driver's devices
// where a node publishes them), all of them and then per GPU model
// (gang.FitEmpty, gang.FitEmptyByModel). The result depends only on the
// demands, minMember and the nodes' GPUs, so it is kept per gang and
// recomputed when one of them changes (not on every node status update):
// every pod of a gang asks the same question, on clusters of thousands of
// nodes.
func (p *GPUGang) fitEmpty(key string, demands gangDemands, nodes []fwk.NodeInfo, minMember int, dra dragpus.GPUs) fitResult {
	cluster := demands.clusterOf(dra, nodes)
	h := fnv.New64a()
	fmt.Fprintf(h, "%d;%t;%t;", minMember, demands.claims, demands.shares)
	for _, d := range demands.demands {
		fmt.Fprintf(h, "%d/%d/%d/%q;", d.Count, d.Milli, d.MemoryMiB, d.Models)
	}
	for _, n := range cluster.Nodes {
		fmt.Fprintf(h, "%s/%s;", n.Name, gpu.InventorySignature(n))
	}
	inventories := make([]*gpu.Inventory, len(cluster.DRA))
	for i, v := range cluster.DRA {
		// The inventory is the same object while the node's slices are;
		// the result keeps it, so that no other inventory can take its
		// address while the hash is kept.
		fmt.Fprintf(h, "%s/dra/%p;", v.Name, v.Inventory)
		inventories[i] = v.Inventory
	}
	sum := h.Sum64()
	if cached, ok := p.fits.Load(key); ok && cached.(fitResult).sum == sum {
		return cached.(fitResult)
	}
	fit := fitResult{sum: sum, inventories: inventories, fit: gang.FitEmpty(cluster, demands.demands, minMember)}
	if fit.fit.Fits() {
		fit.byModel = gang.FitEmptyByModel(cluster, demands.demands, minMember)
	}
	p.fits.Store(key, fit)
	return fit
}

// fitResult is a gang's fitEmpty result and the hash of what it was computed from.
type fitResult struct {
	sum uint64
	// inventories are the DRA inventories hashed by address.
	inventories []*gpu.Inventory
	fit         gang.EmptyFit
	byModel     gang.ModelFit
}

// PreFilterExtensions implements fwk.PreFilterPlugin; the plugin has none.
func (p *GPUGang) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// PostFilter runs when a gang pod found no node. If the gang cannot be
// complete without this pod, the gang's pods waiting at Permit are rejected
// now instead of at their timeout: their GPUs go back to the ledger for the
// other gangs, which is what breaks a deadlock between two half-placed
// gangs. It never nominates a node.
func (p *GPUGang) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	gs := gangOf(state)
	if gs == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	placed := p.placed(gs.key)
	if len(placed) >= gs.minMember {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s is placed; this pod waits for room", gs.key))
	}
	if len(p.members(gs.key))-1 >= gs.minMember {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s can be complete without this pod", gs.key))
	}
	reason := fmt.Sprintf("pod %s found no node", klog.KObj(pod))
	released := p.release(ctx, gs, reason)
	return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s released %d reserved pods: %s", gs.key, released, reason))
}
