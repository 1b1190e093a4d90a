package gpugang

import (
	"context"
	"fmt"
	"iter"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// scoreKey is where PreScore leaves the gang's topology preference.
const scoreKey fwk.StateKey = "PreScore" + Name

// scoreState is the gang's preference and every node's topology.
type scoreState struct {
	pref  *gang.Preference
	nodes map[string]gang.Topology
}

// Clone implements fwk.StateData; scoreState is never modified after PreScore.
func (s *scoreState) Clone() fwk.StateData { return s }

// PreScore reads the GPU topology of every node (interconnect groups, with
// what is free in each, and the topology domain named by args.topologyKey)
// and where the gang's reserved and bound pods are, and builds the gang's
// preference (gang.Preference). Pods outside a gang skip scoring.
func (p *GPUGang) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	gs := gangOf(state)
	if gs == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	all, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: listing nodes: %w", Name, err))
	}
	dra, ledger := dragpus.Read(state), gpuledger.Read(state)
	s := &scoreState{nodes: make(map[string]gang.Topology, len(all))}
	topologies := make([]gang.Topology, 0, len(all))
	for _, ni := range all {
		node := ni.Node()
		if node == nil {
			continue
		}
		t := gang.TopologyOf(node, p.nodeGPUs(dra, ledger, ni), p.args.TopologyKey)
		s.nodes[node.Name] = t
		topologies = append(topologies, t)
	}
	placed := p.placed(gs.key)
	placedOn := map[string]bool{}
	for _, node := range placed {
		placedOn[node] = true
	}
	need := int64(0)
	for _, m := range p.members(gs.key) {
		if _, ok := placed[string(m.UID)]; ok {
			continue
		}
		if d, ok := demandOf(ctx, dra, m); ok {
			need += d.TotalMilli()
		}
	}
	s.pref = gang.NewPreference(topologies, placedOn, need)
	state.Write(scoreKey, s)
	return nil
}

func podsOf(ni fwk.NodeInfo) iter.Seq[*v1.Pod] {
	return func(yield func(*v1.Pod) bool) {
		for _, pi := range ni.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// Score is the node's topology score for the gang pod, 0..100
// (gang.Preference.Score): 100 in the gang's interconnect group and domain,
// 66 in its group only, 33 in its domain only.
func (p *GPUGang) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(scoreKey)
	if err != nil {
		return 0, nil
	}
	s := data.(*scoreState)
	return s.pref.Score(s.nodes[nodeInfo.Node().Name]), nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are already 0..100.
func (p *GPUGang) ScoreExtensions() fwk.ScoreExtensions { return nil }
