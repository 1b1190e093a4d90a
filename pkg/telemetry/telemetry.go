// Package telemetry is gpusched's view of live GPU metrics: per-node, per-GPU
// samples of DCGM signals (utilization, memory in use, video engines, power,
// memory bandwidth, XID errors, row-remap failures), taken at one moment and
// read by the scheduler without blocking. It defines the Source interface that
// the Prometheus client (package telemetry/prometheus) and the simulator's
// replay implement, the static table of GPU models, the telemetry-weighted
// score, and the health view that keeps pods off failing GPUs.
//
// It imports no scheduler framework: like pkg/gpu it is engine code, shared by
// every front end.
package telemetry

import (
	"math"
	"time"
)

// Signal is one DCGM field gpusched reads.
type Signal int

// The signals. The DCGM field each one comes from is Metric(s).
const (
	// GPUUtil is the GPU's utilization, 0..100 %.
	GPUUtil Signal = iota
	// FBUsed and FBFree are the frame buffer (GPU memory) used and free, MiB.
	FBUsed
	FBFree
	// PowerUsage is the power draw in W; PowerLimit the management limit in W.
	PowerUsage
	PowerLimit
	// EncUtil and DecUtil are the video encoder and decoder utilization, 0..100 %.
	EncUtil
	DecUtil
	// DRAMActive is the fraction of cycles the memory interface is busy, 0..1
	// (a profiling field, exported only when DCGM profiling is enabled).
	DRAMActive
	// XIDErrors is the most recent XID error code over the health window; 0
	// means none.
	XIDErrors
	// RowRemapFailure is 1 when the GPU failed to remap a memory row.
	RowRemapFailure
	// UncorrectableRemappedRows counts rows remapped after uncorrectable errors.
	UncorrectableRemappedRows

	// NumSignals is the number of signals.
	NumSignals
)

var metricNames = [NumSignals]string{
	GPUUtil:                   "DCGM_FI_DEV_GPU_UTIL",
	FBUsed:                    "DCGM_FI_DEV_FB_USED",
	FBFree:                    "DCGM_FI_DEV_FB_FREE",
	PowerUsage:                "DCGM_FI_DEV_POWER_USAGE",
	PowerLimit:                "DCGM_FI_DEV_POWER_MGMT_LIMIT",
	EncUtil:                   "DCGM_FI_DEV_ENC_UTIL",
	DecUtil:                   "DCGM_FI_DEV_DEC_UTIL",
	DRAMActive:                "DCGM_FI_PROF_DRAM_ACTIVE",
	XIDErrors:                 "DCGM_FI_DEV_XID_ERRORS",
	RowRemapFailure:           "DCGM_FI_DEV_ROW_REMAP_FAILURE",
	UncorrectableRemappedRows: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
}

// Metric is the DCGM exporter's metric name for s.
func (s Signal) Metric() string { return metricNames[s] }

func (s Signal) String() string { return metricNames[s] }

// SignalOf returns the signal exported under a DCGM metric name.
func SignalOf(metric string) (Signal, bool) {
	for s, name := range metricNames {
		if name == metric {
			return Signal(s), true
		}
	}
	return 0, false
}

// Values are one GPU's (or MIG instance's) samples: a value per signal, and
// which of them were sampled.
type Values struct {
	v   [NumSignals]float64
	has uint32
}

// Set records a sample. Non-finite values are ignored: a NaN says nothing.
func (vs *Values) Set(s Signal, v float64) bool {
	if s < 0 || s >= NumSignals || math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	vs.v[s] = v
	vs.has |= 1 << uint(s)
	return true
}

// Get returns the sample of s and whether there is one.
func (vs *Values) Get(s Signal) (float64, bool) {
	if s < 0 || s >= NumSignals || vs.has&(1<<uint(s)) == 0 {
		return 0, false
	}
	return vs.v[s], true
}

// Empty reports whether no signal was sampled.
func (vs *Values) Empty() bool { return vs.has == 0 }

// GPU is one GPU's samples.
type GPU struct {
	// UUID is the GPU's UUID ("GPU-..."), when the exporter labels it.
	UUID string
	// Index is the GPU's index on its node (the exporter's "gpu" label), or -1.
	Index int
	// Model is the exporter's modelName label, informational.
	Model string
	// Values are the GPU's own samples.
	Values Values
	// MIG are the samples of the GPU's MIG instances, when it is partitioned.
	MIG []MIGInstance
}

// MIGInstance is the samples of one MIG GPU instance.
type MIGInstance struct {
	// Profile is the instance's profile (GPU_I_PROFILE, e.g. "1g.10gb"), ID its
	// instance ID (GPU_I_ID).
	Profile, ID string
	Values      Values
}

// Get returns the GPU's sample of s: its own, or when it has none and is
// partitioned, the highest of its MIG instances' samples, so that one busy
// instance marks the GPU busy.
func (g *GPU) Get(s Signal) (float64, bool) {
	if v, ok := g.Values.Get(s); ok {
		return v, true
	}
	best, found := 0.0, false
	for i := range g.MIG {
		if v, ok := g.MIG[i].Values.Get(s); ok && (!found || v > best) {
			best, found = v, true
		}
	}
	return best, found
}

// Node is one node's GPUs as the telemetry reports them.
type Node struct {
	GPUs []GPU
}

// Lookup returns the samples of the GPU with the given UUID, or when uuid is
// "" or unknown to the telemetry, of the GPU with the given index; nil when
// neither matches. A device whose UUID is known but absent from the
// telemetry is not matched by index: its GPU has left or been replaced.
func (n *Node) Lookup(uuid string, index int) *GPU {
	if n == nil {
		return nil
	}
	if uuid != "" {
		for i := range n.GPUs {
			if n.GPUs[i].UUID == uuid {
				return &n.GPUs[i]
			}
		}
		for i := range n.GPUs {
			if n.GPUs[i].UUID != "" {
				return nil // the telemetry knows UUIDs, and not this one
			}
		}
	}
	for i := range n.GPUs {
		if n.GPUs[i].Index == index && index >= 0 {
			return &n.GPUs[i]
		}
	}
	return nil
}

// Snapshot is every node's GPU samples at one moment. It is immutable once
// published by a Source.
type Snapshot struct {
	// Time is when the samples were taken.
	Time time.Time
	// Nodes maps a node name to its GPUs.
	Nodes map[string]*Node
	// HealthWindow is how far back XIDErrors looks.
	HealthWindow time.Duration
}

// Age is how old s is at now; an absent snapshot is infinitely old.
func (s *Snapshot) Age(now time.Time) time.Duration {
	if s == nil {
		return time.Duration(math.MaxInt64)
	}
	return now.Sub(s.Time)
}

// Node returns a node's samples, or nil.
func (s *Snapshot) Node(name string) *Node {
	if s == nil {
		return nil
	}
	return s.Nodes[name]
}

// Source provides snapshots. Latest must not block: a scheduling cycle calls
// it. It returns nil until the first snapshot is taken.
type Source interface {
	Latest() *Snapshot
}

// Fresh returns the source's snapshot when it is at most maxAge old at now,
// else nil: stale telemetry is unknown telemetry, never an error.
func Fresh(src Source, now time.Time, maxAge time.Duration) (snap *Snapshot, age time.Duration) {
	if src == nil {
		return nil, time.Duration(math.MaxInt64)
	}
	s := src.Latest()
	age = s.Age(now)
	if s == nil || age > maxAge {
		return nil, age
	}
	return s, age
}
