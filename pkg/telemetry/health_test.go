package telemetry

import (
	"math"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestHealthExcluded(t *testing.T) {
	inv, err := gpu.NewInventory(devices(a100, 3)) // UUIDs GPU-a, GPU-b, GPU-c
	if err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{Time: time.Unix(100, 0), HealthWindow: 10 * time.Minute, Nodes: map[string]*Node{
		"n1": {GPUs: []GPU{gpuWith(0, "GPU-a", XIDErrors, 0.0), gpuWith(1, "GPU-b", XIDErrors, 79.0), gpuWith(2, "GPU-c", RowRemapFailure, 1.0)}},
		"n2": {GPUs: []GPU{gpuWith(5, "GPU-z", XIDErrors, 48.0)}}, // a GPU the node no longer has
		"n3": {GPUs: []GPU{gpuWith(2, "", XIDErrors, 13.0)}},      // no UUIDs: matched by index
	}}
	tests := []struct {
		node    string
		health  *Health
		want    gpu.DeviceSet
		wantWhy string
	}{
		{node: "n1", health: &Health{snap}, want: 1<<1 | 1<<2,
			wantWhy: "unhealthy GPUs excluded (GPU 1: XID 79 within 10m0s; GPU 2: row remap failure)"},
		{node: "n2", health: &Health{snap}},
		{node: "n3", health: &Health{snap}, want: 1 << 2, wantWhy: "unhealthy GPUs excluded (GPU 2: XID 13 within 10m0s)"},
		{node: "unknown", health: &Health{snap}},
		{node: "n1", health: nil},
		{node: "n1", health: &Health{}},
	}
	for _, tt := range tests {
		got, why := tt.health.Excluded(tt.node, inv)
		if got != tt.want || why != tt.wantWhy {
			t.Errorf("%s: excluded %b %q, want %b %q", tt.node, got, why, tt.want, tt.wantWhy)
		}
	}
	if n, _ := (&Health{snap}).UnhealthyCount("n1"); n != 2 {
		t.Errorf("n1: %d unhealthy, want 2", n)
	}
}

type fixedSource struct{ snap *Snapshot }

func (s fixedSource) Latest() *Snapshot { return s.snap }

func TestFresh(t *testing.T) {
	snap := &Snapshot{Time: time.Unix(100, 0)}
	tests := []struct {
		name    string
		src     Source
		now     time.Time
		want    *Snapshot
		wantAge time.Duration
	}{
		{"fresh", fixedSource{snap}, time.Unix(130, 0), snap, 30 * time.Second},
		{"exactly maxAge", fixedSource{snap}, time.Unix(160, 0), snap, time.Minute},
		{"stale", fixedSource{snap}, time.Unix(161, 0), nil, 61 * time.Second},
		{"no snapshot yet", fixedSource{}, time.Unix(161, 0), nil, time.Duration(math.MaxInt64)},
		{"no source", nil, time.Unix(161, 0), nil, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		got, age := Fresh(tt.src, tt.now, time.Minute)
		if got != tt.want || age != tt.wantAge {
			t.Errorf("%s: %v %v, want %v %v", tt.name, got, age, tt.want, tt.wantAge)
		}
	}
}

func TestValuesSkipNonFinite(t *testing.T) {
	var vs Values
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if vs.Set(GPUUtil, v) {
			t.Errorf("Set(%v) accepted", v)
		}
	}
	if _, ok := vs.Get(GPUUtil); ok || !vs.Empty() {
		t.Errorf("non-finite values were recorded")
	}
}
