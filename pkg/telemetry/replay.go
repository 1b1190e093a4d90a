package telemetry

import (
	"slices"
	"sort"
	"time"
)

// Sample is one recorded value of one GPU's signal, for replay.
type Sample struct {
	// Seconds is when the value was sampled, in seconds from the start of
	// the replay.
	Seconds int64
	Node    string
	// UUID identifies the GPU when set; otherwise Index does.
	UUID   string
	Index  int
	Signal Signal
	Value  float64
}

// Replay is recorded telemetry: the snapshot the scheduler would have held at
// any moment of a replayed trace. A value holds until the same GPU's signal is
// sampled again.
type Replay struct {
	epoch time.Time
	// times are the distinct sample times, ascending; snaps[i] holds every
	// value sampled at or before times[i].
	times []int64
	snaps []*Snapshot
}

// NewReplay builds a replay from samples in any order. Snapshot times are
// epoch plus the sample time; window is the snapshots' HealthWindow.
func NewReplay(samples []Sample, epoch time.Time, window time.Duration) *Replay {
	sorted := slices.Clone(samples)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Seconds < sorted[j].Seconds })
	r := &Replay{epoch: epoch}
	type key struct {
		node, uuid string
		index      int
	}
	state := map[key]*Values{}
	var order []key
	flush := func(t int64) {
		snap := &Snapshot{Time: epoch.Add(time.Duration(t) * time.Second), Nodes: map[string]*Node{}, HealthWindow: window}
		for _, k := range order {
			n := snap.Nodes[k.node]
			if n == nil {
				n = &Node{}
				snap.Nodes[k.node] = n
			}
			n.GPUs = append(n.GPUs, GPU{UUID: k.uuid, Index: k.index, Values: *state[k]})
		}
		r.times = append(r.times, t)
		r.snaps = append(r.snaps, snap)
	}
	for i, s := range sorted {
		k := key{node: s.Node, uuid: s.UUID, index: s.Index}
		if k.uuid != "" {
			k.index = -1
		}
		v := state[k]
		if v == nil {
			v = &Values{}
			state[k] = v
			order = append(order, k)
		}
		v.Set(s.Signal, s.Value)
		if i == len(sorted)-1 || sorted[i+1].Seconds != s.Seconds {
			flush(s.Seconds)
		}
	}
	return r
}

// Time is the wall-clock time of second t of the replay.
func (r *Replay) Time(t int64) time.Time { return r.epoch.Add(time.Duration(t) * time.Second) }

// At returns the snapshot at second t: every value sampled at or before t;
// nil before the first sample.
func (r *Replay) At(t int64) *Snapshot {
	i := sort.Search(len(r.times), func(i int) bool { return r.times[i] > t })
	if i == 0 {
		return nil
	}
	return r.snaps[i-1]
}

// Len is the number of distinct sample times.
func (r *Replay) Len() int { return len(r.times) }
