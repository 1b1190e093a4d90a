package telemetry

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Part is one term of the telemetry-weighted score. Each part rates one GPU
// from 0 (worst) to 1 (best); a part with nothing to go on rates Neutral.
type Part int

// The parts: three static ones from the model table, five dynamic ones from
// the samples.
const (
	// StaticMemory is the GPU's memory size over the largest in the table (141 GiB).
	StaticMemory Part = iota
	// StaticBandwidth is the model's memory bandwidth over the largest (4800 GB/s).
	StaticBandwidth
	// StaticCompute is the model's FP16 tensor TFLOPS over the largest (989).
	StaticCompute
	// Utilization is 1 − DCGM_FI_DEV_GPU_UTIL/100.
	Utilization
	// Memory is the free fraction of GPU memory: FB_FREE/(FB_USED+FB_FREE).
	Memory
	// Video is 1 − max(ENC_UTIL, DEC_UTIL)/100.
	Video
	// Power is the power headroom: 1 − POWER_USAGE/limit, the limit being
	// DCGM_FI_DEV_POWER_MGMT_LIMIT or else the model's board power.
	Power
	// DRAM is 1 − DCGM_FI_PROF_DRAM_ACTIVE.
	DRAM

	// NumParts is the number of parts.
	NumParts
)

// Neutral is the rating of a part with nothing to go on: unknown model,
// missing sample, stale telemetry.
const Neutral = 0.5

var partNames = [NumParts]string{"static_memory", "static_bandwidth", "static_compute",
	"utilization", "memory", "video", "power", "dram"}

func (p Part) String() string { return partNames[p] }

// Weights weigh the parts; index by Part. A weight of 0 leaves the part out.
type Weights [NumParts]int64

// Sum is the total weight.
func (w *Weights) Sum() int64 {
	var s int64
	for _, v := range w {
		s += v
	}
	return s
}

// AnnotationSensitiveTo on a Pod lists what the pod is sensitive to, as a
// comma-separated list of Sensitivities, e.g. "video,memory-bound".
const AnnotationSensitiveTo = "gpusched.io/sensitive-to"

// Sensitivities maps each allowed value of AnnotationSensitiveTo to the parts
// it weighs more.
var Sensitivities = map[string][]Part{
	"video":         {Video},
	"memory-bound":  {Memory, DRAM, StaticBandwidth, StaticMemory},
	"compute-bound": {Utilization, StaticCompute},
	"power":         {Power},
}

// SensitivityNames lists the allowed values of AnnotationSensitiveTo, sorted.
func SensitivityNames() []string {
	names := make([]string, 0, len(Sensitivities))
	for k := range Sensitivities {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// Sensitize returns w with the parts the pod's annotation value names weighed
// factor times as much: weight max(w, 1) × factor, so a sensitivity counts even
// for a part the configuration leaves out. An empty value returns w. A
// malformed value returns w and an error naming the annotation, the value and
// what is allowed.
func Sensitize(w Weights, value string, factor int64) (Weights, error) {
	if strings.TrimSpace(value) == "" {
		return w, nil
	}
	out := w
	var bad []string
	boosted := [NumParts]bool{}
	for _, item := range strings.Split(value, ",") {
		parts, ok := Sensitivities[strings.TrimSpace(item)]
		if !ok {
			bad = append(bad, fmt.Sprintf("%q", strings.TrimSpace(item)))
			continue
		}
		for _, p := range parts {
			if !boosted[p] {
				out[p] = max(w[p], 1) * factor
				boosted[p] = true
			}
		}
	}
	if len(bad) > 0 {
		return w, fmt.Errorf("annotation %s=%q: unknown value %s: want a comma-separated list of %s",
			AnnotationSensitiveTo, value, strings.Join(bad, ", "), strings.Join(SensitivityNames(), ", "))
	}
	return out, nil
}

// Result is a node's telemetry-weighted score.
type Result struct {
	// Score is 0..gpu.MaxScore, higher is better.
	Score int64
	// Parts are each part's rating averaged over the GPUs scored, for metrics
	// and explanation.
	Parts [NumParts]float64
}

// ScoreNode rates a node for a pod that takes k GPUs: each GPU outside skip is
// rated Σ w_p·r_p / Σ w_p over the parts p, and the node scores
// gpu.MaxScore × the mean rating of its k best-rated GPUs (fewer when it has
// fewer). node is the node's samples, nil when there are none or they are
// stale: then every dynamic part rates Neutral. A node without GPUs, or with
// every weight 0, scores gpu.MaxScore/2; a node whose every GPU is skipped
// scores 0.
func ScoreNode(devices []gpu.Device, node *Node, k int, skip gpu.DeviceSet, w *Weights) Result {
	sum := w.Sum()
	if sum <= 0 || len(devices) == 0 || k <= 0 {
		return Result{Score: gpu.MaxScore / 2}
	}
	type rated struct {
		total float64
		parts [NumParts]float64
	}
	var buf [gpu.MaxDevicesPerNode]rated
	gpus := buf[:0]
	var model string
	var spec *ModelSpec
	for i := range devices {
		if skip.Has(i) {
			continue
		}
		d := &devices[i]
		if i == 0 || d.Model != model { // a node's GPUs are usually of one model: look it up once
			model, spec = d.Model, ModelOf(d.Model)
		}
		var r rated
		r.parts = rate(d, spec, node.Lookup(d.UUID, d.Index))
		for p := range NumParts {
			r.total += float64(w[p]) * r.parts[p]
		}
		r.total /= float64(sum)
		gpus = append(gpus, r)
	}
	if len(gpus) == 0 {
		return Result{Score: 0}
	}
	slices.SortStableFunc(gpus, func(a, b rated) int {
		switch {
		case a.total > b.total:
			return -1
		case a.total < b.total:
			return 1
		}
		return 0
	})
	gpus = gpus[:min(k, len(gpus))]
	var res Result
	var mean float64
	for _, g := range gpus {
		mean += g.total
		for p := range NumParts {
			res.Parts[p] += g.parts[p] / float64(len(gpus))
		}
	}
	mean /= float64(len(gpus))
	res.Score = int64(math.Round(float64(gpu.MaxScore) * mean))
	return res
}

// Rate rates one GPU on every part; g is its samples, nil when unknown.
func Rate(d *gpu.Device, g *GPU) [NumParts]float64 {
	return rate(d, ModelOf(d.Model), g)
}

// rate is Rate with the device's model spec (nil when unknown) looked up.
func rate(d *gpu.Device, spec *ModelSpec, g *GPU) [NumParts]float64 {
	var r [NumParts]float64
	for p := range r {
		r[p] = Neutral
	}
	memGiB := float64(d.MemoryMiB) / 1024
	if memGiB == 0 && spec != nil {
		memGiB = spec.MemoryGiB
	}
	if memGiB > 0 {
		r[StaticMemory] = clamp01(memGiB / maxMemoryGiB)
	}
	if spec != nil {
		r[StaticBandwidth] = spec.BandwidthGBs / maxBandwidthGBs
		r[StaticCompute] = spec.TensorTFLOPS / maxTensorTFLOPS
	}
	if g == nil {
		return r
	}
	if v, ok := g.Get(GPUUtil); ok {
		r[Utilization] = clamp01(1 - v/100)
	}
	used, hasUsed := g.Get(FBUsed)
	free, hasFree := g.Get(FBFree)
	switch {
	case hasUsed && hasFree && used+free > 0:
		r[Memory] = clamp01(free / (used + free))
	case hasUsed && memGiB > 0:
		r[Memory] = clamp01(1 - used/(memGiB*1024))
	case hasFree && memGiB > 0:
		r[Memory] = clamp01(free / (memGiB * 1024))
	}
	enc, hasEnc := g.Get(EncUtil)
	dec, hasDec := g.Get(DecUtil)
	if hasEnc || hasDec {
		r[Video] = clamp01(1 - max(enc, dec)/100)
	}
	if usage, ok := g.Get(PowerUsage); ok {
		limit, _ := g.Get(PowerLimit)
		if limit <= 0 && spec != nil {
			limit = spec.TDPWatts
		}
		if limit > 0 {
			r[Power] = clamp01(1 - usage/limit)
		}
	}
	if v, ok := g.Get(DRAMActive); ok {
		r[DRAM] = clamp01(1 - v)
	}
	return r
}

func clamp01(x float64) float64 { return min(1, max(0, x)) }
