package telemetry

import "strings"

// ModelSpec is the published specification of one GPU model: the static part
// of the telemetry-weighted score. docs/telemetry.md lists the table.
type ModelSpec struct {
	// Key is matched against the node's model name (GFD's
	// nvidia.com/gpu.product, e.g. "NVIDIA-A100-SXM4-80GB"), case-insensitive,
	// as a substring; the first entry in table order that matches wins.
	Key string
	// MemoryGiB is the GPU memory, used when the node does not say.
	MemoryGiB float64
	// BandwidthGBs is the memory bandwidth in GB/s.
	BandwidthGBs float64
	// TensorTFLOPS is dense FP16 tensor throughput: the compute class.
	TensorTFLOPS float64
	// TDPWatts is the board power, the power limit when DCGM does not export one.
	TDPWatts float64
}

// Models is the static table, most specific keys first (so "A100-SXM4-80GB"
// matches before "A100", and "A100" before "A10").
var Models = []ModelSpec{
	{Key: "H200", MemoryGiB: 141, BandwidthGBs: 4800, TensorTFLOPS: 989, TDPWatts: 700},
	{Key: "H100-PCIE", MemoryGiB: 80, BandwidthGBs: 2000, TensorTFLOPS: 756, TDPWatts: 350},
	{Key: "H100", MemoryGiB: 80, BandwidthGBs: 3350, TensorTFLOPS: 989, TDPWatts: 700},
	{Key: "A100-SXM4-80GB", MemoryGiB: 80, BandwidthGBs: 2039, TensorTFLOPS: 312, TDPWatts: 400},
	{Key: "A100-PCIE-80GB", MemoryGiB: 80, BandwidthGBs: 1935, TensorTFLOPS: 312, TDPWatts: 300},
	{Key: "A100-PCIE", MemoryGiB: 40, BandwidthGBs: 1555, TensorTFLOPS: 312, TDPWatts: 250},
	{Key: "A100", MemoryGiB: 40, BandwidthGBs: 1555, TensorTFLOPS: 312, TDPWatts: 400},
	{Key: "L40S", MemoryGiB: 48, BandwidthGBs: 864, TensorTFLOPS: 362, TDPWatts: 350},
	{Key: "L40", MemoryGiB: 48, BandwidthGBs: 864, TensorTFLOPS: 181, TDPWatts: 300},
	{Key: "A30", MemoryGiB: 24, BandwidthGBs: 933, TensorTFLOPS: 165, TDPWatts: 165},
	{Key: "A10", MemoryGiB: 24, BandwidthGBs: 600, TensorTFLOPS: 125, TDPWatts: 150},
	{Key: "L4", MemoryGiB: 24, BandwidthGBs: 300, TensorTFLOPS: 121, TDPWatts: 72},
	{Key: "V100", MemoryGiB: 16, BandwidthGBs: 900, TensorTFLOPS: 125, TDPWatts: 300},
	{Key: "T4", MemoryGiB: 16, BandwidthGBs: 320, TensorTFLOPS: 65, TDPWatts: 70},
	{Key: "P100", MemoryGiB: 16, BandwidthGBs: 732, TensorTFLOPS: 19, TDPWatts: 250},
}

// Largest values in Models: the static signals are fractions of these.
const (
	maxMemoryGiB    = 141
	maxBandwidthGBs = 4800
	maxTensorTFLOPS = 989
)

// ModelOf returns the spec of a model name, or nil when the table does not
// know it.
func ModelOf(model string) *ModelSpec {
	upper := strings.ToUpper(model)
	for i := range Models {
		if strings.Contains(upper, Models[i].Key) {
			return &Models[i]
		}
	}
	return nil
}
