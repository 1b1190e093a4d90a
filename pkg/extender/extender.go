// Package extender serves gpusched's placement engine (pkg/gpu) behind the
// stock kube-scheduler's HTTP extender API (k8s.io/kube-scheduler/extender/v1):
// /filter, /prioritize, /bind and /preempt, plus /healthz, /readyz and
// /metrics.
//
// Every decision is the engine's and is made exactly as the GPUPlacement
// plugin makes it (pkg/plugins/gpuplacement): the demand from
// gpu.Policy.Demand, feasibility and reasons from gpu.Check, the GPUs from
// gpu.Policy.Place with the node's CPU and memory (host.go), the score from
// gpu.Policy.Score, rescaled with gpu.Policy.Rescale (to 0..10 here, 0..100
// there). Only the source of a node's pods differs: the plugin reads the
// scheduler's snapshot, the extender its own informer-fed Cluster. See
// docs/extender.md.
package extender

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/pkg/policyservice"
)

// MsgUnknownNode is the failure message for a node the extender's informers
// have not (yet) seen, for a pod that needs its GPUs.
const MsgUnknownNode = "node unknown to gpusched"

// Extender makes the extender's decisions on typed requests; Server serves
// them over HTTP. It is safe for concurrent use.
type Extender struct {
	cluster *Cluster
	ledger  *gpu.Ledger
	policy  *gpu.Policy
	client  kubernetes.Interface
	// external is the External scoring strategy's policy service; nil for
	// the engine's policies (UseExternal).
	external *policyservice.Scorer

	// bindMu serializes the part of each bind that reads a node's GPUs,
	// chooses GPUs, assumes them and holds the pod on the node, as
	// gpu.Ledger.Assume requires; the API write happens outside it.
	bindMu sync.Mutex
	// onBind, when set, observes the result of every bind ("bound",
	// "already-bound", "error"): the server's metrics.
	onBind func(result string)
	// leaderOnly: bind only while leading, that is while this instance
	// holds the leader lease (leader.go). Set before serving.
	leaderOnly bool
	leading    atomic.Bool
	fence      *fence // with leaderOnly: the lease's bound on binds
	// inFlight holds the UIDs of pods held on a node whose Binding is being
	// written: a retry must not report them bound before the write is done.
	inFlight sync.Map
	// schedulerNames are the schedulers whose pods Bind binds.
	schedulerNames []string
	// placeGangs: Filter places pods of a gang as any other, instead of
	// refusing them with MsgGangPod (PlaceGangPods).
	placeGangs bool
	// settleAfter: a read this long after a Binding of unknown outcome
	// ended settles it (DefaultBindSettleAfter).
	settleAfter time.Duration
	// closed is closed by Close, ending the reads that settle binds.
	closed    chan struct{}
	closeOnce sync.Once
}

// New returns an Extender deciding with policy over the cluster's view,
// binding through client. The policy counts the cluster's GPUs by model
// as the extender's ledger reads its nodes (gpu.Policy.WithFleet).
func New(cluster *Cluster, client kubernetes.Interface, policy *gpu.Policy) *Extender {
	ledger := gpu.NewLedger()
	e := &Extender{cluster: cluster, ledger: ledger, policy: policy.WithFleet(ledger), client: client,
		schedulerNames: []string{v1.DefaultSchedulerName}, settleAfter: DefaultBindSettleAfter, closed: make(chan struct{})}
	removeNode := ledger.RemoveNode
	cluster.onNodeGone.Store(&removeNode)
	logger := klog.Background().WithName("extender")
	e.ledger.ReportConflicts(func(node string, conflicts []string) {
		logger.Info(gpu.ConflictsMessage(conflicts), "node", node, "conflicts", conflicts)
	})
	return e
}

// BindOnlyFor makes the extender bind only pods whose spec.schedulerName is
// one of names (default-scheduler until it is called).
func (e *Extender) BindOnlyFor(names ...string) { e.schedulerNames = slices.Clone(names) }

// PlaceGangPods makes Filter place pods of a gang (labelled
// podgroup.LabelPodGroup) one by one as any other pod, for a scheduler whose
// own plugin holds gangs together; by default they are refused with
// MsgGangPod (Options.PodGroups).
func (e *Extender) PlaceGangPods(place bool) { e.placeGangs = place }

// MsgGangPod is why Filter refuses a pod of a gang that asks for GPUs on
// every node, unless PlaceGangPods: placed one at a time, 3 pods of a 5-pod
// gang that can never run would start and hold their GPUs for good. A gang
// pod without GPUs (a launcher) is filtered as any pod: the extender, which
// every pod may reach, does not decide where it runs.
const MsgGangPod = "the pod is in a gang (label " + podgroup.LabelPodGroup + "), and the extender places pods one at a time: " +
	"schedule gangs with gpusched's own scheduler (schedulerName: gpusched, docs/gang.md), " +
	"or run the extender with --pod-groups=" + PodGroupsPlace + " beside a gang plugin of this scheduler"

var errGangPod = errors.New(MsgGangPod)

// candidate is one node of a filter or prioritize request, and what was
// found for it.
type candidate struct {
	name string
	// node is the Node object the node's GPUs are read from: the request's
	// when it carries Node objects (nodeCacheCapable: false), else the
	// informer's; nil when unknown.
	node  *v1.Node
	state *NodeState
	// dra: a DRA driver hands out the node's GPUs (Cluster.DRAManaged).
	dra bool
	// Filter's results: the reasons the node fails, and elsewhere: the
	// pod's GPUs are reserved on other nodes.
	elsewhere bool
	reasons   gpu.Reasons
}

// candidates resolves the request's nodes against the cluster view, in the
// request's order. Pass the list to putCandidates when done with it.
func (e *Extender) candidates(args *extenderv1.ExtenderArgs) *[]candidate {
	list := candidateLists.Get().(*[]candidate)
	out := (*list)[:0]
	if args.NodeNames != nil {
		for _, name := range *args.NodeNames {
			out = append(out, candidate{name: name})
		}
	} else {
		for i := range args.Nodes.Items {
			out = append(out, candidate{name: args.Nodes.Items[i].Name, node: &args.Nodes.Items[i]})
		}
	}
	e.cluster.resolve(out)
	e.cluster.markDRA(out)
	if args.NodeNames != nil {
		for i := range out {
			if out[i].state != nil {
				out[i].node = out[i].state.Node
			}
		}
	}
	*list = out
	return list
}

// view is the ledger's view of a known candidate's GPUs.
//
// When the candidate's node is the cluster's own Node object, the view is
// memoized in the NodeState. That is exact: the ledger's view of a node
// depends on the node, its pods and the assumptions for those pods, and the
// extender assumes GPUs only for a pod it holds on the node with the
// assignment annotation, which the ledger counts on its own; every Hold and
// Release makes a new NodeState. Only time changes it otherwise: a memo
// that holds a reservation past its expiry is read again.
func (e *Extender) view(c *candidate) *gpu.NodeGPUs {
	if c.state == nil {
		return e.ledger.Node(c.node, 0, c.state.PodSeq())
	}
	if c.node != c.state.Node {
		return e.ledger.Node(c.node, c.state.Generation, c.state.PodSeq())
	}
	if n := c.state.gpus.Load(); n != nil && (len(n.Reserved) == 0 || n.ReservationsCurrent(time.Now())) {
		return n
	}
	n := e.ledger.Node(c.node, c.state.Generation, c.state.PodSeq())
	c.state.gpus.Store(n)
	return n
}

// Filter returns every node of the request the pod's GPU demand fits, and
// for each other node why not: in FailedAndUnresolvableNodes when freeing
// GPUs cannot help (gpu.Reasons.Unresolvable), else in FailedNodes. A pod
// without GPU demand fits every node. A malformed demand fails every node as
// unresolvable with the engine's message, which names the annotation, the
// value and what is allowed. A node unknown to the extender fails (resolvably)
// with MsgUnknownNode, and a node whose GPUs a DRA driver hands out
// (Cluster.DRAManaged) unresolvably with gpu.ReasonDRAManaged: the
// extender gives no GPU there. The request must have a Pod and either
// NodeNames or Nodes (see validArgs).
func (e *Extender) Filter(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	result := &extenderv1.ExtenderFilterResult{
		FailedNodes:                extenderv1.FailedNodesMap{},
		FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
	}
	demand, err := e.policy.Demand(args.Pod)
	if err == nil {
		e.policy.Observe(args.Pod.UID, demand)
	}
	if _, gang := args.Pod.Labels[podgroup.LabelPodGroup]; gang && !e.placeGangs && err == nil && !demand.IsZero() {
		err = errGangPod
	}
	switch {
	case err != nil:
		msg := err.Error()
		for name := range nodeNames(args) {
			result.FailedAndUnresolvableNodes[name] = msg
		}
		setFeasible(result, args, nil)
		return result
	case demand.IsZero():
		setFeasible(result, args, func(int) bool { return true })
		return result
	}

	list := e.candidates(args)
	defer putCandidates(list)
	cands := *list
	reserved := e.reservedFor(args.Pod, &demand)
	parallelize(len(cands), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			switch c := &cands[i]; {
			case c.node == nil:
			case c.dra:
				c.reasons = gpu.Reasons(gpu.ReasonDRAManaged)
			case reserved != nil && !reserved.Has(c.name):
				c.elsewhere = true
			default:
				n := e.forPod(e.view(c), c.name, args.Pod, &demand, reserved)
				c.reasons = gpu.Check(n, &gpu.Request{Demand: &demand}).Reasons
			}
		}
	})
	for i := range cands {
		switch c := &cands[i]; {
		case c.node == nil:
			result.FailedNodes[c.name] = MsgUnknownNode
		case c.elsewhere:
			result.FailedAndUnresolvableNodes[c.name] = MsgReservedElsewhere
		case c.reasons == 0:
		case c.reasons.Unresolvable():
			result.FailedAndUnresolvableNodes[c.name] = reasonsText(c.reasons)
		default:
			result.FailedNodes[c.name] = reasonsText(c.reasons)
		}
	}
	setFeasible(result, args, func(i int) bool { return cands[i].node != nil && !cands[i].elsewhere && cands[i].reasons == 0 })
	return result
}

// reservedFor is the nodes where a reservation pod (of demand d) may take
// is held (gpu.ReservationIndex.NodesFor); nil when there are none.
func (e *Extender) reservedFor(pod *v1.Pod, d *gpu.Demand) sets.Set[string] {
	if d.IsZero() {
		return nil
	}
	return e.cluster.reservations.NodesFor(pod, d, e.ledger.HoldsReservation)
}

// forPod is n, node's view, as pod (of demand d) sees it: with the GPUs of
// a reservation it takes there given back, when node is one of reserved
// (reservedFor), as the plugin's PreFilter decides (gpu.NodeGPUs.ForPod).
func (e *Extender) forPod(n *gpu.NodeGPUs, node string, pod *v1.Pod, d *gpu.Demand, reserved sets.Set[string]) *gpu.NodeGPUs {
	if !reserved.Has(node) {
		return n
	}
	n, _ = n.ForPod(pod, d, e.ledger.HoldsReservation)
	return n
}

// MsgReservedElsewhere is the failure message for a node other than those
// where a migration plan reserved GPUs for the pod (gpu.Reservation): the
// pod goes where the plan made room, as under the GPUPlacement plugin.
const MsgReservedElsewhere = "a migration plan reserved GPUs for this pod on another node (" + gpu.AnnotationReservations + ")"

// reasonTexts memoizes gpu.Reasons.String: thousands of nodes of a request
// can fail for the same reasons.
var reasonTexts sync.Map // gpu.Reasons -> string

func reasonsText(r gpu.Reasons) string {
	if s, ok := reasonTexts.Load(r); ok {
		return s.(string)
	}
	s := r.String()
	reasonTexts.Store(r, s)
	return s
}

// nodeNames yields the names of the request's nodes.
func nodeNames(args *extenderv1.ExtenderArgs) iter.Seq[string] {
	return func(yield func(string) bool) {
		if args.NodeNames != nil {
			for _, name := range *args.NodeNames {
				if !yield(name) {
					return
				}
			}
			return
		}
		for i := range args.Nodes.Items {
			if !yield(args.Nodes.Items[i].Name) {
				return
			}
		}
	}
}

// setFeasible fills the result's feasible nodes, in the form of the request:
// names for nodeCacheCapable, else Node objects. Always non-nil, since the
// scheduler reads a nil list as "no node fits".
func setFeasible(result *extenderv1.ExtenderFilterResult, args *extenderv1.ExtenderArgs, fits func(i int) bool) {
	if args.NodeNames != nil {
		names := getNames(len(*args.NodeNames))
		for i, name := range *args.NodeNames {
			if fits != nil && fits(i) {
				names = append(names, name)
			}
		}
		result.NodeNames = &names
		return
	}
	list := &v1.NodeList{Items: make([]v1.Node, 0, len(args.Nodes.Items))}
	for i := range args.Nodes.Items {
		if fits != nil && fits(i) {
			list.Items = append(list.Items, args.Nodes.Items[i])
		}
	}
	result.Nodes = list
}

// Prioritize scores every node of the request 0..extenderv1.MaxExtenderPriority
// with the engine's score step (gpu.Policy.ScoreStep), as the plugin's
// Score and NormalizeScore do: the policy's engine score for the GPUs it
// chooses on the node with the node's CPU and memory, rescaled over the
// nodes. A node the demand no longer fits scores 0 and, as in the plugin,
// takes part in the rescaling; a node unknown to the extender, or whose
// GPUs DRA hands out (for a pod with GPU demand), scores 0 and does not. A
// pod the policy does not score (gpu.Policy.Scores: one without GPU demand
// under a policy that weighs GPUs alone), or with a malformed demand, gets
// 0 everywhere, so that the scheduler's own scores decide.
func (e *Extender) Prioritize(ctx context.Context, args *extenderv1.ExtenderArgs) extenderv1.HostPriorityList {
	out := getPriorities(nodeCount(args))
	for name := range nodeNames(args) {
		out = append(out, extenderv1.HostPriority{Host: name})
	}
	demand, err := e.policy.Demand(args.Pod)
	if err != nil || !e.policy.Scores(&demand) {
		return out
	}
	list := e.candidates(args)
	defer putCandidates(list)
	cands := *list
	m := e.cluster.maxima()
	reserved := e.reservedFor(args.Pod, &demand)
	step := getStep(len(cands))
	defer putStep(step)
	parallelize(len(cands), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if c := &cands[i]; c.node != nil && (demand.IsZero() || !c.dra) {
				step.views[i] = e.forPod(e.view(c), c.name, args.Pod, &demand, reserved)
				step.reqs[i] = gpu.Request{Demand: &demand, Host: hostOf(c.state, m)}
			}
		}
	})
	// The nodes' answers are remembered with their views, as the plugin's.
	e.policy.ScoreStep(step.views, step.reqs, extenderv1.MaxExtenderPriority, parallelize, step.out)
	if e.external != nil && e.prioritizeExternal(ctx, args, cands, step, out) {
		return out
	}
	for i := range step.out {
		out[i].Score = step.out[i].Score
	}
	return out
}

// nodeCount is the number of the request's nodes.
func nodeCount(args *extenderv1.ExtenderArgs) int {
	if args.NodeNames != nil {
		return len(*args.NodeNames)
	}
	return len(args.Nodes.Items)
}

// Preempt chooses the victims on each of the scheduler's candidate nodes by
// the GPUs they free, as the GPUPreemption plugin does: among the
// scheduler's victims and every other pod on the node of lower priority
// than the pod, the cheapest set that frees one placement for the pod's GPU
// demand (gpu.ChooseVictims; docs/queueing.md gives the rule). The
// scheduler chose its victims by the resources it sees (CPU, memory,
// nvidia.com/gpu counts) and may have scattered them over GPUs; the
// extender replaces them, and adds the scheduler's back only when the
// node's CPU or memory would not hold the pod without them. A node where no
// such set frees the GPUs is dropped. It evaluates what-ifs
// (gpu.NodeGPUs.Without), so the ledger is untouched, and returns victims
// by UID with the scheduler's count of PodDisruptionBudget violations (the
// extender does not read PodDisruptionBudgets). A pod without GPU demand
// keeps every node and its victims; a malformed demand, or a node unknown
// to the extender, keeps none.
func (e *Extender) Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) *extenderv1.ExtenderPreemptionResult {
	victims := metaVictims(args)
	result := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	demand, err := gpu.DemandFromPod(args.Pod)
	if err != nil {
		return result
	}
	if demand.IsZero() {
		result.NodeNameToMetaVictims = victims
		return result
	}
	// A bind in its critical section has assumed GPUs but may not hold its
	// pod on the node yet; waiting for it makes the states below complete.
	e.bindMu.Lock()
	states := make(map[string]*NodeState, len(victims))
	for name := range victims {
		states[name] = e.cluster.Node(name)
	}
	e.bindMu.Unlock()

	req := gpu.Request{Demand: &demand}
	reserved := e.reservedFor(args.Pod, &demand)
	for name, v := range victims {
		state := states[name]
		if state == nil || state.Node == nil || v == nil || e.cluster.DRAManaged(name) {
			continue
		}
		if chosen := e.gpuVictims(state, args.Pod, &req, v, reserved); chosen != nil {
			result.NodeNameToMetaVictims[name] = chosen
		}
	}
	return result
}

// gpuVictims is Preempt's choice on one node, or nil to drop the node;
// reserved are the nodes where the pod may take a reservation
// (reservedFor).
func (e *Extender) gpuVictims(state *NodeState, pod *v1.Pod, req *gpu.Request, proposed *extenderv1.MetaVictims, reserved sets.Set[string]) *extenderv1.MetaVictims {
	byScheduler := make(map[types.UID]bool, len(proposed.Pods))
	for _, p := range proposed.Pods {
		if p != nil {
			byScheduler[types.UID(p.UID)] = true
		}
	}
	priority := corev1helpers.PodPriority(pod)
	var pool []*v1.Pod
	for _, p := range state.Pods {
		if byScheduler[p.UID] || corev1helpers.PodPriority(p) < priority {
			pool = append(pool, p)
		}
	}
	// A pod a reservation is for may take its GPUs (forPod), as Filter
	// found.
	n := e.forPod(e.ledger.Node(state.Node, state.Generation, state.PodSeq()), state.Node.Name, pod, req.Demand, reserved)
	vs := make([]gpu.Victim, len(pool))
	for i, p := range pool {
		vs[i] = gpu.Victim{Priority: corev1helpers.PodPriority(p), Pods: 1}
		if a, ok := gpu.AssignmentOf(p); ok && a.Node == state.Node.Name {
			vs[i].Held = []gpu.Assignment{a}
		}
	}
	chosen, ok := gpu.ChooseVictims(n, req, vs)
	if !ok {
		return nil
	}
	gone := make(map[types.UID]bool, len(chosen)+len(byScheduler))
	for _, i := range chosen {
		gone[pool[i].UID] = true
	}
	if len(gone) == 0 || !hostHolds(state, pod, gone) {
		for uid := range byScheduler {
			gone[uid] = true
		}
	}
	// Pods without an assignment that hold GPUs (claims) have no exact
	// what-if in the engine: the final set is checked on a view rebuilt
	// without it.
	if !gpu.Check(e.forPod(e.withoutVictims(state, gone), state.Node.Name, pod, req.Demand, reserved), req).OK() {
		return nil
	}
	out := &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{}, NumPDBViolations: proposed.NumPDBViolations}
	for _, p := range state.Pods {
		if gone[p.UID] {
			out.Pods = append(out.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
	}
	return out
}

// hostHolds reports whether the node's CPU and memory hold pod once the
// pods in gone are gone.
func hostHolds(state *NodeState, pod *v1.Pod, gone map[types.UID]bool) bool {
	free := state.freeOf()
	for _, p := range state.Pods {
		if gone[p.UID] && gpu.HoldsNode(p) {
			free.Give(p)
		}
	}
	cpu, mem := gpu.PodRequests(pod)
	return cpu <= free.MilliCPU && mem <= free.MemoryBytes
}

// withoutVictims is the node's GPUs once the pods in gone are gone: the
// ledger's view less each one's assignment. A pod that holds GPUs without
// an assignment (counted as a claim, see gpu.PlaceClaim) has no exact
// subtraction, so then the view is rebuilt from the other pods on a
// throwaway ledger instead.
func (e *Extender) withoutVictims(state *NodeState, gone map[types.UID]bool) *gpu.NodeGPUs {
	n := e.ledger.Node(state.Node, state.Generation, state.PodSeq())
	for _, p := range state.Pods {
		if !gone[p.UID] {
			continue
		}
		if a, ok := gpu.AssignmentOf(p); ok && a.Node == state.Node.Name {
			n = n.Without(&a)
			continue
		}
		if d, err := gpu.DemandFromPod(p); err == nil && !d.IsZero() {
			rest := func(yield func(*v1.Pod) bool) {
				for _, p := range state.Pods {
					if !gone[p.UID] && !yield(p) {
						return
					}
				}
			}
			return gpu.NewLedger().Node(state.Node, state.Generation, rest)
		}
	}
	return n
}

// metaVictims returns the request's victims by UID, whichever form it came in.
func metaVictims(args *extenderv1.ExtenderPreemptionArgs) map[string]*extenderv1.MetaVictims {
	if args.NodeNameToMetaVictims != nil {
		return args.NodeNameToMetaVictims
	}
	out := make(map[string]*extenderv1.MetaVictims, len(args.NodeNameToVictims))
	for name, v := range args.NodeNameToVictims {
		if v == nil {
			continue
		}
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, 0, len(v.Pods)), NumPDBViolations: v.NumPDBViolations}
		for _, p := range v.Pods {
			if p != nil {
				mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
			}
		}
		out[name] = mv
	}
	return out
}
