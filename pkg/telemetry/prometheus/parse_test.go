package prometheus

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

func sample(value float64, labels ...string) *model.Sample {
	m := model.Metric{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[model.LabelName(labels[i])] = model.LabelValue(labels[i+1])
	}
	return &model.Sample{Metric: m, Value: model.SampleValue(value)}
}

// TestParseSkipsMalformed feeds the parser well-formed samples mixed with
// malformed and partial ones: the good ones land on their node and GPU, each
// bad one is skipped and its cause logged.
func TestParseSkipsMalformed(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	vec := model.Vector{
		sample(40, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "n1", "gpu", "0", "UUID", "GPU-a", "modelName", "NVIDIA A100"),
		sample(1234, "__name__", "DCGM_FI_DEV_FB_USED", "Hostname", "n1", "gpu", "0", "UUID", "GPU-a"),
		sample(70, "__name__", "DCGM_FI_DEV_GPU_UTIL", "hostname", "n2", "gpu", "1"), // newer exporters: lower-case, no UUID
		sample(30, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "n1", "gpu", "1", "UUID", "GPU-b", "GPU_I_PROFILE", "3g.40gb", "GPU_I_ID", "1"),
		sample(90, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "n1", "gpu", "1", "UUID", "GPU-b", "GPU_I_PROFILE", "3g.40gb", "GPU_I_ID", "2"),
		// malformed
		sample(50, "__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", "0", "UUID", "GPU-x"),                  // no node
		sample(50, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "n1"),                             // no GPU identity
		sample(50, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "n1", "gpu", "one"),               // bad index
		sample(math.NaN(), "__name__", "DCGM_FI_DEV_POWER_USAGE", "Hostname", "n1", "UUID", "GPU-a"), // NaN
		sample(math.Inf(1), "__name__", "DCGM_FI_DEV_FB_FREE", "Hostname", "n1", "UUID", "GPU-a"),    // Inf
		sample(1, "__name__", "DCGM_FI_DEV_SOMETHING_ELSE", "Hostname", "n1", "UUID", "GPU-a"),       // not ours
		nil,
	}
	b := newBuilder(DefaultNodeLabels)
	b.add(logger, vec, nil)
	xid := telemetry.XIDErrors
	b.add(logger, model.Vector{sample(79, "Hostname", "n1", "gpu", "0", "UUID", "GPU-a")}, &xid)

	n1 := b.nodes["n1"]
	if n1 == nil || len(n1.GPUs) != 2 {
		t.Fatalf("n1: %+v, want GPUs GPU-a and GPU-b", n1)
	}
	a := n1.Lookup("GPU-a", 0)
	for s, want := range map[telemetry.Signal]float64{telemetry.GPUUtil: 40, telemetry.FBUsed: 1234, telemetry.XIDErrors: 79} {
		if got, ok := a.Get(s); !ok || got != want {
			t.Errorf("GPU-a %s = %v %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []telemetry.Signal{telemetry.PowerUsage, telemetry.FBFree} {
		if got, ok := a.Get(s); ok {
			t.Errorf("GPU-a %s = %v, want no sample (it was not finite)", s, got)
		}
	}
	if a.Model != "NVIDIA A100" {
		t.Errorf("GPU-a model %q", a.Model)
	}
	b1 := n1.Lookup("GPU-b", 1)
	if got, ok := b1.Get(telemetry.GPUUtil); !ok || got != 90 || len(b1.MIG) != 2 {
		t.Errorf("GPU-b utilization %v with %d MIG instances, want 90 (the busiest of 2)", got, len(b1.MIG))
	}
	if g := b.nodes["n2"].Lookup("", 1); g == nil {
		t.Errorf("n2 GPU 1 missing")
	} else if got, _ := g.Get(telemetry.GPUUtil); got != 70 {
		t.Errorf("n2 GPU 1 utilization %v, want 70", got)
	}
	if len(b.nodes) != 2 {
		t.Errorf("nodes %v, want n1 and n2 only", len(b.nodes))
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, cause := range []string{"no node label", "neither UUID nor gpu label", "GPU index label is not a non-negative integer",
		"value is NaN or infinite", "unknown metric", "empty sample"} {
		if !strings.Contains(logs, cause) {
			t.Errorf("no log line for %q in:\n%s", cause, logs)
		}
	}
	if got := strings.Count(logs, "value is NaN or infinite"); got != 1 {
		t.Errorf("%d log lines for NaN samples, want 1 per cause and query", got)
	}
}

// TestParseNodeLabel: a configured label is the only one read.
func TestParseNodeLabel(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	b := newBuilder([]string{"node"})
	b.add(logger, model.Vector{
		sample(10, "__name__", "DCGM_FI_DEV_GPU_UTIL", "node", "k8s-node-1", "Hostname", "dcgm-pod-xyz", "gpu", "0"),
		sample(10, "__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "dcgm-pod-abc", "gpu", "0"),
	}, nil)
	if len(b.nodes) != 1 || b.nodes["k8s-node-1"] == nil {
		t.Errorf("nodes %v, want k8s-node-1 only", b.nodes)
	}
}

// FuzzParse: no sample, however malformed, panics the parser.
func FuzzParse(f *testing.F) {
	f.Add("DCGM_FI_DEV_GPU_UTIL", "n1", "0", "GPU-a", "", "", 40.0)
	f.Add("DCGM_FI_DEV_FB_USED", "", "-1", "", "1g.10gb", "7", math.NaN())
	f.Fuzz(func(t *testing.T, name, host, index, uuid, profile, id string, value float64) {
		b := newBuilder(DefaultNodeLabels)
		smp := sample(value, "__name__", name, "Hostname", host, "gpu", index, "UUID", uuid, "GPU_I_PROFILE", profile, "GPU_I_ID", id)
		b.add(ktesting.NewLogger(t, ktesting.NewConfig()), model.Vector{smp, smp}, nil)
		for _, n := range b.nodes {
			for _, g := range n.GPUs {
				for s := range telemetry.NumSignals {
					if v, ok := g.Get(s); ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
						t.Fatalf("non-finite %s recorded", s)
					}
				}
			}
		}
	})
}
