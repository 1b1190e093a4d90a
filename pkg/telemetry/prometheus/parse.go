package prometheus

import (
	"strconv"

	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// The DCGM exporter's labels that identify a sample's GPU and node.
const (
	labelUUID       = "UUID"
	labelIndex      = "gpu"
	labelModel      = "modelName"
	labelMIGProfile = "GPU_I_PROFILE"
	labelMIGID      = "GPU_I_ID"
)

// DefaultNodeLabels are the labels that name a sample's node when no label is
// configured: "Hostname" (older exporters) and "hostname", in that order.
var DefaultNodeLabels = []string{"Hostname", "hostname"}

// builder accumulates samples into a snapshot.
type builder struct {
	nodeLabels []string
	nodes      map[string]*telemetry.Node
	// skipped counts samples dropped as malformed, by cause.
	skipped map[string]int
}

func newBuilder(nodeLabels []string) *builder {
	return &builder{nodeLabels: nodeLabels, nodes: map[string]*telemetry.Node{}, skipped: map[string]int{}}
}

// add records the samples of vec. When signal is nil, each sample's signal is
// its metric name; otherwise every sample is that signal (a query whose
// result carries no metric name). Samples without a node label, without both
// a UUID and a valid GPU index, of an unknown metric, or with a NaN or
// infinite value are skipped, and logged once per cause and query.
func (b *builder) add(logger klog.Logger, vec model.Vector, signal *telemetry.Signal) {
	for _, smp := range vec {
		if cause := b.addSample(smp, signal); cause != "" {
			if b.skipped[cause] == 0 {
				if smp == nil {
					logger.Info("Skipping malformed telemetry sample", "cause", cause)
				} else {
					logger.Info("Skipping malformed telemetry sample", "cause", cause, "sample", smp.Metric.String(), "value", float64(smp.Value))
				}
			}
			b.skipped[cause]++
		}
	}
}

// addSample records one sample, or returns why it cannot.
func (b *builder) addSample(smp *model.Sample, signal *telemetry.Signal) string {
	if smp == nil {
		return "empty sample"
	}
	var sig telemetry.Signal
	if signal != nil {
		sig = *signal
	} else {
		s, ok := telemetry.SignalOf(string(smp.Metric[model.MetricNameLabel]))
		if !ok {
			return "unknown metric"
		}
		sig = s
	}
	node := ""
	for _, l := range b.nodeLabels {
		if v := string(smp.Metric[model.LabelName(l)]); v != "" {
			node = v
			break
		}
	}
	if node == "" {
		return "no node label"
	}
	uuid := string(smp.Metric[labelUUID])
	index := -1
	if raw := string(smp.Metric[labelIndex]); raw != "" {
		i, err := strconv.Atoi(raw)
		if err != nil || i < 0 {
			return "GPU index label is not a non-negative integer"
		}
		index = i
	}
	if uuid == "" && index < 0 {
		return "neither UUID nor gpu label"
	}
	n := b.nodes[node]
	if n == nil {
		n = &telemetry.Node{}
		b.nodes[node] = n
	}
	g := findGPU(n, uuid, index)
	if g == nil {
		n.GPUs = append(n.GPUs, telemetry.GPU{UUID: uuid, Index: index, Model: string(smp.Metric[labelModel])})
		g = &n.GPUs[len(n.GPUs)-1]
	}
	values := &g.Values
	if profile, id := string(smp.Metric[labelMIGProfile]), string(smp.Metric[labelMIGID]); profile != "" || id != "" {
		values = migValues(g, profile, id)
	}
	if !values.Set(sig, float64(smp.Value)) {
		return "value is NaN or infinite"
	}
	return ""
}

// findGPU returns the GPU of n with the UUID, or without UUIDs the index.
func findGPU(n *telemetry.Node, uuid string, index int) *telemetry.GPU {
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if (uuid != "" && g.UUID == uuid) || (uuid == "" && g.UUID == "" && g.Index == index) {
			return g
		}
	}
	return nil
}

func migValues(g *telemetry.GPU, profile, id string) *telemetry.Values {
	for i := range g.MIG {
		if g.MIG[i].Profile == profile && g.MIG[i].ID == id {
			return &g.MIG[i].Values
		}
	}
	g.MIG = append(g.MIG, telemetry.MIGInstance{Profile: profile, ID: id})
	return &g.MIG[len(g.MIG)-1].Values
}
