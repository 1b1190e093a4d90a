package simulator

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/policyservice"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
	"github.com/gpusched/gpusched/pkg/trace"
)

// The environment's observations: the action mask of the pending pod and
// every node's row of features (gpu.FeatureColumns, and the score columns
// asked for), cached per node while its state stays.

// observeTimed is observe, its time counted as the features'.
func (e *Env) observeTimed(d *decision) (*pb.Observation, error) {
	t0 := time.Now()
	obs, err := e.observe(d)
	e.timings.Features += time.Since(t0)
	return obs, err
}

// setMask sets the action mask of the decision's pod and e.fit: the nodes
// every Filter plugin accepts.
func (e *Env) setMask(d *decision) error {
	fit, err := e.fitting(d)
	if err != nil {
		return err
	}
	// The nodes that fit with their positions; a node the environment
	// does not list (none: its nodes are the episode's) cannot be chosen.
	e.fit, e.fitAt = fit[:0:0], e.fitAt[:0]
	var listed []int
	if !d.partial && len(d.at) == len(fit) { // fit is d.feasible
		listed = e.positions(d.nodes)
	}
	for j, ni := range fit {
		i, ok := -1, false
		if listed != nil {
			i = listed[d.at[j]]
			ok = i >= 0
		} else {
			i, ok = e.positionOK(ni)
		}
		if ok {
			e.fit, e.fitAt = append(e.fit, ni), append(e.fitAt, i)
		}
	}
	e.mask = make([]byte, len(e.names))
	for _, i := range e.fitAt {
		e.mask[i] = 1
	}
	return nil
}

// observe is the observation of a decision: the pod, every node's row, the
// mask of the nodes every Filter plugin accepts (set by advance), and the
// scheduler's own choice.
func (e *Env) observe(d *decision) (*pb.Observation, error) {
	demand, err := gpu.DemandFromPod(d.pod)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", d.pod.Name, err)
	}
	demand.FillHost(d.pod)
	fit := e.fit
	width := 4 * len(e.columns)
	values := make([]byte, width*len(e.names))
	if err := e.nodeRows(values); err != nil {
		return nil, err
	}
	if err := e.fitRows(d, fit, &demand, values); err != nil {
		return nil, err
	}
	if err := e.scoreRows(d, fit, values); err != nil {
		return nil, err
	}
	return &pb.Observation{
		Pod:           policyservice.PodMessage(d.pod, &demand),
		Nodes:         &pb.FeatureMatrix{Columns: e.columns, Rows: int32(len(e.names)), Values: values},
		ActionMask:    e.mask,
		BuiltinAction: int32(e.index[d.node]),
	}, nil
}

// fitRows writes the rows of the nodes the pod fits into values. The
// features of a node depend on the node's state and the pod's demand,
// except the built-in score, rescaled over the feasible nodes: rows are
// cached by demand at the node's generation and their built-in score taken
// from the cycle's own (normalized, weighted) GPUPlacement scores, which
// are the same numbers (TestEnvironmentCachedRowsMatchFeatures). Where the
// cycle has no scores for every fitting node (one feasible node, a partial
// Filter scan), the rows are described anew.
func (e *Env) fitRows(d *decision, fit []fwk.NodeInfo, demand *gpu.Demand, values []byte) error {
	width, base := 4*len(e.columns), 4*len(gpu.FeatureColumns())
	cached := !e.noCache && !d.partial && d.scores != nil && len(d.scores) == len(fit) && e.scoreWeight > 0
	k := -1
	if cached {
		k, cached = e.demandNumber(demand.Key())
	}
	var rows *fitRows
	if cached {
		rows = e.fitRowsOf(k, base)
	}
	var miss []fwk.NodeInfo
	var missAt []int
	for j, ni := range fit {
		i := e.fitAt[j]
		if rows != nil && rows.gen[i] == e.rows.gen[i] {
			copy(values[i*width:], rows.values[i*base:(i+1)*base])
		} else {
			miss, missAt = append(miss, ni), append(missAt, i)
		}
	}
	if len(miss) > 0 {
		feats, err := gpuplacement.Features(d.state, miss, nil)
		if err != nil {
			// A pod without GPUs under a policy that weighs GPUs alone
			// leaves GPUPlacement no state: its rows are the nodes' state,
			// fits set.
			one := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))
			for _, i := range e.fitAt {
				copy(values[i*width+4*e.fitsColumn:], one)
			}
			return nil
		}
		m := policyservice.Matrix(feats, demand, e.scratch).Values
		e.scratch = m
		for j, ni := range miss {
			i := missAt[j]
			row := m[j*base : (j+1)*base]
			copy(values[i*width:], row)
			if rows != nil {
				copy(rows.values[i*base:], row)
				rows.gen[i] = ni.GetGeneration()
			}
		}
	}
	if !cached {
		return nil
	}
	for j, ns := range d.scores { // the scores of d.feasible, which is fit
		for _, ps := range ns.Scores {
			if ps.Name == gpuplacement.Name {
				v := float32(float64(ps.Score) / float64(e.scoreWeight) / float64(fwk.MaxNodeScore))
				binary.LittleEndian.PutUint32(values[e.fitAt[j]*width+4*e.builtinColumn:], math.Float32bits(v))
			}
		}
	}
	return nil
}

// scoreRows writes the score columns of the nodes the pod fits into
// values (NewEnv made sure the profile has GPUPlacement).
func (e *Env) scoreRows(d *decision, fit []fwk.NodeInfo, values []byte) error {
	if len(e.scoreTypes) == 0 || len(fit) == 0 {
		return nil
	}
	if e.scorers == nil {
		s, err := gpuplacement.NewScorers(d.state, e.scoreTypes, gpu.StaticShapes(e.typical))
		if err != nil {
			return fmt.Errorf("score columns: %w", err)
		}
		e.scorers = s
	}
	scores, err := e.scorers.Scores(d.state, d.pod, fit)
	if err != nil {
		return fmt.Errorf("score columns, pod %s: %w", d.pod.Name, err)
	}
	width, base := 4*len(e.columns), 4*len(gpu.FeatureColumns())
	for k := range e.scoreTypes {
		for j := range fit {
			at := e.fitAt[j]*width + base + 4*k
			binary.LittleEndian.PutUint32(values[at:], math.Float32bits(float32(scores[k][j])))
		}
	}
	return nil
}

// fitRowsOf is the cached rows of the demand numbered k, base bytes each,
// made on first use.
func (e *Env) fitRowsOf(k, base int) *fitRows {
	for len(e.rows.fit) <= k {
		n := len(e.names)
		rows := fitRows{gen: make([]int64, n), values: make([]byte, n*base)}
		for i := range rows.gen {
			rows.gen[i] = -1
		}
		e.rows.fit = append(e.rows.fit, rows)
	}
	return &e.rows.fit[k]
}

// demandNumber is the number of a demand in e.demands, given it at its
// first use; ok is false when maxCachedDemands are numbered already.
func (e *Env) demandNumber(key gpu.DemandKey) (k int, ok bool) {
	if k, ok := e.demands[key]; ok {
		return k, true
	}
	if len(e.demands) >= maxCachedDemands {
		return -1, false
	}
	if e.demands == nil {
		e.demands = map[gpu.DemandKey]int{}
	}
	k = len(e.demands)
	e.demands[key] = k
	return k, true
}

// fitting is the nodes every Filter plugin accepts for the decision's pod.
// The decision's feasible nodes are all of them unless Filter scanned only
// part of the nodes; the rest are then filtered here. (The simulator's GPU
// screen rejects only nodes GPUPlacement's Filter rejects, so it leaves
// the set as it is.)
func (e *Env) fitting(d *decision) ([]fwk.NodeInfo, error) {
	if !d.partial {
		return d.feasible, nil
	}
	seen := map[string]bool{}
	for _, ni := range d.feasible {
		seen[ni.Node().Name] = true
	}
	var rest []fwk.NodeInfo
	for _, ni := range d.nodes {
		if !seen[ni.Node().Name] {
			rest = append(rest, ni)
		}
	}
	ok := make([]bool, len(rest))
	fw := e.ep.sched.fw
	fw.Parallelizer().Until(e.ep.ctx, len(rest), func(i int) {
		ok[i] = fw.RunFilterPlugins(e.ep.ctx, d.state, d.pod, rest[i]).IsSuccess()
	}, "Filter")
	out := append([]fwk.NodeInfo(nil), d.feasible...)
	for i, ni := range rest {
		if ok[i] {
			out = append(out, ni)
		}
	}
	return out, e.ep.ctx.Err()
}

// nodeRows writes every node's row for a pod that does not fit it into
// values: the node's state alone, cached while the node's generation is
// the cached one. Rows are described for a probe pod of one GPU (e.probe):
// a row without the pod-dependent columns is the same for every pod. With
// noCache every row is described anew, straight into values.
func (e *Env) nodeRows(values []byte) error {
	all, err := e.ep.sched.snapshot.NodeInfos().List()
	if err != nil {
		return err
	}
	var stale []fwk.NodeInfo
	var at []int
	positions := e.positions(all)
	for j, ni := range all {
		if i := positions[j]; i >= 0 && (e.noCache || e.rows.gen[i] != ni.GetGeneration()) {
			stale = append(stale, ni)
			at = append(at, i)
		}
	}
	width := 4 * len(e.columns)
	if len(stale) > 0 {
		if e.probe == nil {
			e.probe = framework.NewCycleState()
			pod := trace.NewPod("gpusched-env-probe", 0, 0, 1, gpu.MilliPerGPU, nil)
			if _, status, _ := e.ep.sched.fw.RunPreFilterPlugins(e.ep.ctx, e.probe, pod); !status.IsSuccess() {
				return fmt.Errorf("describing the nodes: PreFilter of a one-GPU probe pod: %w", status.AsError())
			}
		}
		feats, err := gpuplacement.Features(e.probe, stale, make([]bool, len(stale)))
		if err != nil {
			return fmt.Errorf("describing the nodes: %w", err)
		}
		m := policyservice.Matrix(feats, &gpu.Demand{}, e.scratch).Values
		e.scratch = m
		base := len(m) / len(stale)
		for j, ni := range stale {
			// The score columns of a node the pod does not fit are 0.
			i := at[j]
			if e.noCache {
				copy(values[i*width:], m[j*base:(j+1)*base])
				continue
			}
			row := e.rows.values[i*width : (i+1)*width]
			clear(row)
			copy(row, m[j*base:(j+1)*base])
			e.rows.gen[i] = ni.GetGeneration()
		}
	}
	if !e.noCache {
		copy(values, e.rows.values)
	}
	return nil
}

// positions is the position of each of the nodes (positionOK), -1 for a
// node the environment does not list, kept for the list last asked about
// (listNumbers): the snapshot's list of every node, or the nodes its
// PreFilter left.
func (e *Env) positions(nodes []fwk.NodeInfo) []int {
	return e.listed.of(nodes, func(ni fwk.NodeInfo) int {
		if i, ok := e.positionOK(ni); ok {
			return i
		}
		return -1
	})
}

// positionOK is the node's position among the environment's nodes (its
// action, its row), and false for a node the environment does not list.
func (e *Env) positionOK(ni fwk.NodeInfo) (int, bool) {
	i, ok := e.index[ni.Node().Name]
	return i, ok
}

// info is the episode's progress.
func (e *Env) info() *pb.Info {
	ep, c := e.ep, float64(e.capacity)
	out := &pb.Info{
		SubmittedPods: int32(ep.out.Submitted), PlacedPods: int32(ep.out.Placed), FailedPods: int32(ep.out.Failed),
		ArrivedPct: 100 * float64(ep.arrived) / c, AllocatedPct: 100 * float64(ep.used) / c, FragmentPct: 100 * ep.frag.total / c,
	}
	if e.pending == nil {
		out.UnallocatedPctAt_100 = ep.result().UnallocatedPctAt100
	}
	return out
}
