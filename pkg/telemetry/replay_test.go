package telemetry

import (
	"testing"
	"time"
)

func TestReplay(t *testing.T) {
	epoch := time.Unix(1000, 0)
	r := NewReplay([]Sample{
		{Seconds: 60, Node: "n1", Index: 0, Signal: GPUUtil, Value: 90},
		{Seconds: 0, Node: "n1", Index: 0, Signal: GPUUtil, Value: 10},
		{Seconds: 0, Node: "n1", UUID: "GPU-b", Index: 1, Signal: GPUUtil, Value: 20},
		{Seconds: 30, Node: "n2", Index: 0, Signal: XIDErrors, Value: 79},
	}, epoch, time.Minute)
	util := func(s *Snapshot, node, uuid string, index int) float64 {
		g := s.Node(node).Lookup(uuid, index)
		if g == nil {
			return -1
		}
		v, _ := g.Get(GPUUtil)
		return v
	}
	if r.At(-1) != nil {
		t.Error("a snapshot before the first sample")
	}
	tests := []struct {
		at       int64
		wantTime time.Time
		n1gpu0   float64
		n1gpuB   float64
		n2       bool
	}{
		{at: 0, wantTime: epoch, n1gpu0: 10, n1gpuB: 20},
		{at: 45, wantTime: epoch.Add(30 * time.Second), n1gpu0: 10, n1gpuB: 20, n2: true},
		{at: 600, wantTime: epoch.Add(time.Minute), n1gpu0: 90, n1gpuB: 20, n2: true},
	}
	for _, tt := range tests {
		s := r.At(tt.at)
		if !s.Time.Equal(tt.wantTime) {
			t.Errorf("at %d: time %v, want %v", tt.at, s.Time, tt.wantTime)
		}
		if got := util(s, "n1", "", 0); got != tt.n1gpu0 {
			t.Errorf("at %d: n1 GPU 0 util %v, want %v", tt.at, got, tt.n1gpu0)
		}
		if got := util(s, "n1", "GPU-b", 1); got != tt.n1gpuB {
			t.Errorf("at %d: n1 GPU-b util %v, want %v", tt.at, got, tt.n1gpuB)
		}
		if got := s.Node("n2") != nil; got != tt.n2 {
			t.Errorf("at %d: n2 present %v, want %v", tt.at, got, tt.n2)
		}
	}
	if r.Len() != 3 {
		t.Errorf("%d sample times, want 3", r.Len())
	}
}
