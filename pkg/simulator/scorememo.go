package simulator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
)

// The Score half of the node memo: a feasible node unchanged since an
// earlier cycle of the pod's shape has the raw scores it had then, as long
// as every Score plugin that runs is node-local and GPUPlacement's scores
// key (gpuplacement.NodeLocalScores: the cluster's largest capacities, the
// policy's typical pods, the fleet's census and prices) is the same. The
// scores are then normalized and weighed over all the feasible nodes, as
// the framework does, so a cycle's scores are exactly those of
// RunScorePlugins (TestScoreMemoMatchesFramework).

// scoreRow is one pod shape's remembered raw scores: for the node numbered
// i (nodeMemo.index), entries[i], and its plugins' scores at
// values[i*len(names):], names being the Score plugins that ran for the
// shape, in the framework's order. Pointer-free, so that rows cost the
// garbage collector nothing to scan.
type scoreRow struct {
	names   []string
	entries []scoreEntry
	values  []int64
}

// scoreEntry is when a node's scores were taken: the generation of its
// NodeInfo and the memo's epoch of GPUPlacement's scores key.
type scoreEntry struct {
	known      bool
	epoch      int32
	generation int64
}

// scoresEpoch numbers GPUPlacement's scores keys in the order the run
// meets them: a key other than the last one starts a new epoch, and scores
// of an older epoch are not handed back.
type scoresEpoch struct {
	last gpuplacement.ScoresKey
	n    int32
}

// at is the epoch of key, starting a new one when it is not the last key.
func (e *scoresEpoch) at(key gpuplacement.ScoresKey) int32 {
	if key != e.last || e.n == 0 {
		e.last = key
		e.n++
	}
	return e.n
}

// scoreRow is the pod's row for this cycle, with the names of the Score
// plugins that run in it and the epoch of its key; nil when the cycle's
// scores are not remembered: a Score plugin that runs is not node-local,
// GPUPlacement's scores depend on more than the node, or the pod cannot be
// keyed.
func (m *nodeMemo) scoreRow(state fwk.CycleState, pod *v1.Pod) (row *scoreRow, names []string, key gpuplacement.ScoresKey, epoch int32) {
	if m == nil || m.scorers == nil {
		return nil, nil, key, 0
	}
	skipped := state.GetSkipScorePlugins()
	names = slices.DeleteFunc(slices.Clone(m.scorers), skipped.Has)
	key, ok := scoresKey(state, names)
	if !ok {
		return nil, nil, key, 0
	}
	shape, ok := m.podShape(pod)
	if !ok {
		return nil, nil, key, 0
	}
	row = m.scores[shape]
	if row == nil || !slices.Equal(row.names, names) {
		row = &scoreRow{names: names}
		m.scores[shape] = row
	}
	return row, names, key, m.epoch.at(key)
}

// scoresKey is GPUPlacement's scores key now when it is among the Score
// plugins named, the zero key when it is not; false when its scores are
// not node-local.
func scoresKey(state fwk.CycleState, names []string) (gpuplacement.ScoresKey, bool) {
	if !slices.Contains(names, gpuplacement.Name) {
		return gpuplacement.ScoresKey{}, true
	}
	return gpuplacement.NodeLocalScores(state)
}

// recall writes the node numbered i's raw scores into out, when they were
// taken at generation in epoch.
func (r *scoreRow) recall(i int, generation int64, epoch int32, out []fwk.PluginScore) bool {
	if i >= len(r.entries) {
		return false
	}
	if e := r.entries[i]; !e.known || e.epoch != epoch || e.generation != generation {
		return false
	}
	for k, v := range r.values[i*len(r.names) : (i+1)*len(r.names)] {
		out[k] = fwk.PluginScore{Name: r.names[k], Score: v}
	}
	return true
}

// remember keeps the node numbered i's raw scores, taken at generation in
// epoch; false when they are not of the row's plugins.
func (r *scoreRow) remember(i int, generation int64, epoch int32, raw []fwk.PluginScore) bool {
	n := len(r.names)
	if len(raw) != n {
		return false
	}
	for k := range raw {
		if raw[k].Name != r.names[k] {
			return false
		}
	}
	if i >= len(r.entries) {
		grow := i + 1 - len(r.entries)
		r.entries = append(r.entries, make([]scoreEntry, grow)...)
		r.values = append(r.values, make([]int64, grow*n)...)
	}
	r.entries[i] = scoreEntry{known: true, epoch: epoch, generation: generation}
	for k := range raw {
		r.values[i*n+k] = raw[k].Score
	}
	return true
}

// score runs the Score plugins on the decision's feasible nodes and
// normalizes and weighs their scores, as the framework's RunScorePlugins
// does, taking the raw scores of the nodes the memo remembers (scoreRow)
// from it.
func (s *scheduler) score(ctx context.Context, d *decision) ([]fwk.NodePluginScores, *fwk.Status) {
	state, pod, feasible := d.state, d.pod, d.feasible
	row, names, key, epoch := s.memo.scoreRow(state, pod)
	if row == nil {
		return s.fw.RunScorePlugins(ctx, state, pod, feasible)
	}
	n := len(names)
	scores := make([]fwk.NodePluginScores, len(feasible))
	at, numbers := make([]int, len(feasible)), s.memo.numbers(d.nodes)
	raw := make([]fwk.PluginScore, len(feasible)*n)
	var todo []int
	for i, ni := range feasible {
		at[i] = numbers[d.at[i]]
		out := raw[i*n : (i+1)*n : (i+1)*n]
		if row.recall(at[i], ni.GetGeneration(), epoch, out) {
			scores[i] = fwk.NodePluginScores{Name: ni.Node().Name, RawScores: out}
			s.memo.served++
			continue
		}
		todo = append(todo, i)
	}
	var mu sync.Mutex
	var failed error
	s.fw.Parallelizer().Until(ctx, len(todo), func(k int) {
		i := todo[k]
		got, status := s.fw.RunRawScorePlugins(ctx, state, pod, feasible[i])
		if !status.IsSuccess() {
			mu.Lock()
			failed = cmp.Or(failed, status.AsError())
			mu.Unlock()
			return
		}
		scores[i] = fwk.NodePluginScores{Name: feasible[i].Node().Name, RawScores: got}
	}, "Score")
	if failed != nil {
		return nil, fwk.AsStatus(fmt.Errorf("running Score plugins: %w", failed))
	}
	if err := ctx.Err(); err != nil { // the scan stopped with nodes unscored
		return nil, fwk.AsStatus(fmt.Errorf("running Score plugins: %w", err))
	}
	// Scores taken while the key moved (the fleet's room moved the
	// prices) are of neither key: they are not kept.
	if again, ok := scoresKey(state, names); ok && again == key {
		for _, i := range todo {
			if !row.remember(at[i], feasible[i].GetGeneration(), epoch, scores[i].RawScores) {
				break // not the row's plugins (then for every node): none is kept
			}
		}
	}
	if status := s.fw.NormalizeScores(ctx, state, pod, scores); !status.IsSuccess() {
		return nil, status
	}
	return scores, nil
}
