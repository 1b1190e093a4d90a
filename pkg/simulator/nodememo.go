package simulator

import (
	"encoding/json"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpudra"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gpuresourcesfit"
)

// nodeLocalFilters are the Filter plugins whose verdict on a node depends
// on the pod and that node's NodeInfo alone (its Node object and its pods),
// with GPUPlacement's as long as no GPU is excluded by telemetry (see
// newNodeMemo). The others read the
// whole cluster (InterPodAffinity, PodTopologySpread) or the API (volumes).
var nodeLocalFilters = []string{
	"NodeName", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
	gpuresourcesfit.Name, gpuplacement.Name,
}

// draFilters are the DRA path's allocating Filter plugins. In a simulated
// run they are node-local too: every ResourceSlice is local to one node,
// each pod's claims are its own (the memo keys them by their spec, see
// draManager.claimSpecs), and a node's allocations change only when a pod
// is bound to it or removed from it, which changes its NodeInfo's
// generation. A verdict they give on a node they did not run on leaves no
// allocation for it in the cycle state, so the run filters the node it
// commits to again (scheduler.commit).
var draFilters = []string{dynamicResources, gpudra.Name}

// nodeLocalScorers are the Score plugins whose raw score of a node depends
// on the pod and that node's NodeInfo alone, with GPUPlacement's as long as
// its NodeLocalScores says so (its key then joins the memo's, see
// scoreRow). The others read the whole cluster (InterPodAffinity,
// PodTopologySpread, ImageLocality's spread of images) or telemetry.
var nodeLocalScorers = []string{
	"NodeResourcesFit", "NodeResourcesBalancedAllocation", "TaintToleration", "NodeAffinity", gpuplacement.Name,
}

// nodeMemo remembers what the node-local plugins said of each node for each
// pod shape, the Filter plugins' verdict and the Score plugins' raw
// scores, and hands it back while the node's NodeInfo has the same
// generation (it changes with the node and with every pod that comes or
// goes): most nodes are unchanged between two pods, and pods of a trace
// come in few shapes. Verdicts apply to a cycle only when every Filter
// plugin that runs in it (not skipped by its PreFilter) is node-local,
// scores only when every Score plugin that runs is (scorememo.go).
type nodeMemo struct {
	// others are the profile's Filter plugins that are not node-local; a
	// cycle that runs any of them is not remembered.
	others []string
	// shapeOf is each pod's shape (an index into shapes); pods are the
	// run's input objects, never modified.
	shapeOf map[*v1.Pod]int32
	shapes  map[string]int32
	// index numbers the nodes, in the order first seen; verdicts[shape][i]
	// is the last verdict for the shape on node i, with the generation of
	// the NodeInfo it was made on. A cycle reads one shape's row, in node
	// order.
	index    map[string]int
	verdicts [][]verdict
	// listed is the numbers of the nodes last listed (numbers).
	listed listNumbers
	// claims, on the DRA path, is the spec of each of a pod's claims, or
	// false when a claim cannot stand for its name (see
	// draManager.claimSpecs); nil on the annotation path.
	claims func(*v1.Pod) ([]resourceapi.ResourceClaimSpec, bool)
	// scorers are the profile's Score plugins when all are node-local
	// (nil otherwise: no scores are remembered); scores[shape] is the
	// shape's raw scores (scoreRow), keyed by GPUPlacement's scores key
	// through epoch (scorememo.go).
	scorers []string
	scores  []*scoreRow
	epoch   scoresEpoch
	// served counts the nodes whose raw scores were handed back.
	served int
}

// verdict is the Filter plugins' status on a node, and whether it is a
// fit, kept beside it so that a cycle reading verdicts need not follow the
// pointer.
type verdict struct {
	known, fits bool
	generation  int64
	status      *fwk.Status
}

// newNodeMemo returns the memo for a profile whose Filter plugins are
// filters and whose Score plugins are scorers, on the DRA path when dra is
// set; nil when GPUPlacement's verdicts depend on more than the node:
// GPUs excluded by replayed telemetry, or nodes whose GPUs hold
// reservations, which expire with the clock (reservations). On the DRA
// path no scores are remembered: NodeResourcesFit's scores read DRA's
// devices too, and GPUPlacement's the devices the cycle's claims get.
func newNodeMemo(filters, scorers []string, dra *draManager, telemetry, reservations bool) *nodeMemo {
	if telemetry || reservations {
		return nil
	}
	m := &nodeMemo{shapeOf: map[*v1.Pod]int32{}, shapes: map[string]int32{}, index: map[string]int{}}
	local := nodeLocalFilters
	if dra != nil {
		local = slices.Concat(nodeLocalFilters, draFilters)
		m.claims = dra.claimSpecs
	}
	for _, f := range filters {
		if !slices.Contains(local, f) {
			m.others = append(m.others, f)
		}
	}
	if dra == nil && !slices.ContainsFunc(scorers, func(name string) bool { return !slices.Contains(nodeLocalScorers, name) }) {
		m.scorers = scorers
	}
	return m
}

// holdReservations reports whether any of the nodes' GPUs hold reservations
// (gpu.AnnotationReservations).
func holdReservations(nodes []*v1.Node) bool {
	return slices.ContainsFunc(nodes, func(n *v1.Node) bool {
		_, ok := n.Annotations[gpu.AnnotationReservations]
		return ok
	})
}

// shape is the pod's shape for this cycle's Filter verdicts, or false when
// the cycle runs a Filter plugin that is not node-local (or the pod cannot
// be keyed).
func (m *nodeMemo) shape(state fwk.CycleState, pod *v1.Pod) (int32, bool) {
	if m == nil {
		return 0, false
	}
	skipped := state.GetSkipFilterPlugins()
	for _, f := range m.others {
		if !skipped.Has(f) {
			return 0, false
		}
	}
	return m.podShape(pod)
}

// podShape is the pod's shape, numbered at its first sight; false when the
// pod cannot be keyed.
func (m *nodeMemo) podShape(pod *v1.Pod) (int32, bool) {
	if id, ok := m.shapeOf[pod]; ok {
		return id, true
	}
	var claims []resourceapi.ResourceClaimSpec
	if len(pod.Spec.ResourceClaims) > 0 {
		ok := m.claims != nil
		if ok {
			claims, ok = m.claims(pod)
		}
		if !ok {
			return 0, false
		}
	}
	key, err := shapeKey(pod, claims)
	if err != nil {
		return 0, false
	}
	id, ok := m.shapes[key]
	if !ok {
		id = int32(len(m.shapes))
		m.shapes[key] = id
		m.verdicts = append(m.verdicts, nil)
		m.scores = append(m.scores, nil)
	}
	m.shapeOf[pod] = id
	return id, true
}

// shapeKey is what node-local plugins can read of a pod: all of it
// but its name, UID, labels and other metadata besides its namespace and
// annotations (GPUPlacement reads its demand from annotations). A pod's
// claims count by their specs (claims, in the order of the pod's), not
// their names.
func shapeKey(pod *v1.Pod, claims []resourceapi.ResourceClaimSpec) (string, error) {
	spec := pod.Spec
	if len(claims) > 0 {
		spec.ResourceClaims = slices.Clone(spec.ResourceClaims)
		for i := range spec.ResourceClaims {
			spec.ResourceClaims[i].ResourceClaimName = nil
		}
	}
	b, err := json.Marshal(struct {
		Namespace   string
		Annotations map[string]string
		Spec        *v1.PodSpec
		Status      *v1.PodStatus
		Claims      []resourceapi.ResourceClaimSpec `json:",omitempty"`
	}{pod.Namespace, pod.Annotations, &spec, &pod.Status, claims})
	return string(b), err
}

// recall fills in statuses[i], and fits[i] when it is a fit, for the nodes
// whose verdict for the shape is remembered and current, and appends the
// indices of the others to missing.
func (m *nodeMemo) recall(shape int32, nodes []fwk.NodeInfo, statuses []*fwk.Status, fits []bool, missing []int) []int {
	row, numbers := m.verdicts[shape], m.numbers(nodes)
	for i, n := range nodes {
		if j := numbers[i]; j < len(row) && row[j].known && row[j].generation == n.GetGeneration() {
			statuses[i], fits[i] = row[j].status, row[j].fits
			continue
		}
		missing = append(missing, i)
	}
	return missing
}

// remember keeps the verdicts statuses[i] for the nodes at indices.
func (m *nodeMemo) remember(shape int32, nodes []fwk.NodeInfo, statuses []*fwk.Status, indices []int) {
	numbers := m.numbers(nodes)
	if len(m.verdicts[shape]) < len(m.index) {
		m.verdicts[shape] = append(m.verdicts[shape], make([]verdict, len(m.index)-len(m.verdicts[shape]))...)
	}
	row := m.verdicts[shape]
	for _, i := range indices {
		if !lasting(statuses[i]) {
			continue
		}
		row[numbers[i]] = verdict{known: true, fits: statuses[i].IsSuccess(), generation: nodes[i].GetGeneration(), status: statuses[i]}
	}
}

// lasting reports whether a verdict holds until the node changes: a fit,
// or a node that does not fit. An error (DynamicResources' Filter timing
// out, a cancelled context) is not remembered.
func lasting(status *fwk.Status) bool {
	switch status.Code() {
	case fwk.Success, fwk.Unschedulable, fwk.UnschedulableAndUnresolvable:
		return true
	}
	return false
}

// numbers is the memo's number of each of the nodes (indexOf), kept for
// the list last asked about (listNumbers).
func (m *nodeMemo) numbers(nodes []fwk.NodeInfo) []int {
	return m.listed.of(nodes, m.indexOf)
}

// listNumbers keeps a number for each node of the list last asked about.
// The scheduler's snapshot lists its nodes in the same slice from cycle to
// cycle, making a new one when a node comes or goes, so the numbers of a
// cycle's nodes are found without a look-up per node. The slice is held
// with its numbers, so that its array cannot be reused for another list.
type listNumbers struct {
	listed  []fwk.NodeInfo
	numbers []int
}

// of is the number of each of the nodes, by number unless nodes is the
// list last asked about.
func (l *listNumbers) of(nodes []fwk.NodeInfo, number func(fwk.NodeInfo) int) []int {
	if len(nodes) == len(l.listed) && (len(nodes) == 0 || &nodes[0] == &l.listed[0]) {
		return l.numbers
	}
	l.listed, l.numbers = nodes, make([]int, len(nodes))
	for i, n := range nodes {
		l.numbers[i] = number(n)
	}
	return l.numbers
}

// indexOf is the node's number in the memo, given on first sight of its
// name.
func (m *nodeMemo) indexOf(n fwk.NodeInfo) int {
	name := n.Node().Name
	i, ok := m.index[name]
	if !ok {
		i = len(m.index)
		m.index[name] = i
	}
	return i
}

// filterNames is the framework's Filter plugins.
func filterNames(f framework.Framework) []string {
	var names []string
	for _, pl := range f.ListPlugins().Filter.Enabled {
		names = append(names, pl.Name)
	}
	return names
}

// scoreNames is the framework's Score plugins, in the order it runs them.
func scoreNames(f framework.Framework) []string {
	var names []string
	for _, pl := range f.ListPlugins().Score.Enabled {
		names = append(names, pl.Name)
	}
	return names
}
