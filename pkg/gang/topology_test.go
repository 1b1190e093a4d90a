package gang

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

const rackKey = "example.com/rack"

// topologies reads nodes as the plugin does, with nothing allocated.
func topologies(nodes ...*v1.Node) []Topology {
	l := gpu.NewLedger()
	var out []Topology
	for _, n := range nodes {
		out = append(out, TopologyOf(n, l.Node(n, 0, func(func(*v1.Pod) bool) {}), rackKey))
	}
	return out
}

func TestTopologyOf(t *testing.T) {
	ts := topologies(
		gt.MakeGPUNode("a").GFD(a100, 4, 81920).Clique("nvl-1").Label(rackKey, "r1").Obj(),
		gt.MakeGPUNode("b").Devices(gpu.Device{Index: 0, Model: a100, Group: "g0"}, gpu.Device{Index: 1, Model: a100, Group: "g1"}).Obj(),
	)
	if got := ts[0]; got.Domain != "r1" || len(got.Groups) != 1 || got.Groups["clique/nvl-1"] != 4000 {
		t.Errorf("clique node: %+v", got)
	}
	if got := ts[1]; got.Domain != "" || got.Groups["node/b/g0"] != 1000 || got.Groups["node/b/g1"] != 1000 {
		t.Errorf("per-device groups: %+v", got)
	}
}

func TestPreferenceScore(t *testing.T) {
	nodes := topologies(
		gt.MakeGPUNode("c1-r1").GFD(a100, 4, 81920).Clique("c1").Label(rackKey, "r1").Obj(),
		gt.MakeGPUNode("c1-r1b").GFD(a100, 4, 81920).Clique("c1").Label(rackKey, "r1").Obj(),
		gt.MakeGPUNode("c2-r1").GFD(a100, 4, 81920).Clique("c2").Label(rackKey, "r1").Obj(),
		gt.MakeGPUNode("c3-r2").GFD(a100, 4, 81920).Clique("c3").Label(rackKey, "r2").Obj(),
		gt.MakeGPUNode("plain").GFD(a100, 8, 81920).Obj(),
	)
	byName := map[string]Topology{}
	for _, n := range nodes {
		byName[n.Node] = n
	}
	tests := []struct {
		name     string
		placedOn map[string]bool
		need     int64
		want     map[string]int64
	}{
		{
			name:     "a gang pod placed on c1-r1",
			placedOn: map[string]bool{"c1-r1": true},
			need:     4000,
			want: map[string]int64{
				"c1-r1":  100, // same clique and rack: 3 points * 100 / 3
				"c1-r1b": 100, // same clique (multi-node NVLink) and rack: 3 * 100 / 3
				"c2-r1":  33,  // same rack only: 1 * 100 / 3
				"c3-r2":  0,   // neither
				"plain":  0,   // its GPUs are a group of their own, no rack
			},
		},
		{
			name: "nothing placed, the gang needs 8 GPUs",
			need: 8000,
			want: map[string]int64{
				"c1-r1":  100, // clique c1 has 8 GPUs free, rack r1 has 12: 3 * 100 / 3
				"c1-r1b": 100,
				"c2-r1":  33, // clique c2 has only 4, rack r1 has 12: 1 * 100 / 3
				"c3-r2":  0,  // clique c3 and rack r2 hold 4
				"plain":  66, // its own 8 GPUs hold the gang, no rack: 2 * 100 / 3
			},
		},
		{
			name: "nothing placed, the gang needs 16 GPUs: no group or domain holds it",
			need: 16000,
			want: map[string]int64{"c1-r1": 0, "c1-r1b": 0, "c2-r1": 0, "c3-r2": 0, "plain": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPreference(nodes, tt.placedOn, tt.need)
			for node, want := range tt.want {
				if got := p.Score(byName[node]); got != want {
					t.Errorf("%s: score %d, want %d", node, got, want)
				}
			}
		})
	}
}
