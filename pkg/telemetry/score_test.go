package telemetry

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

const a100 = "NVIDIA-A100-SXM4-80GB"

// gpuWith builds a GPU's samples from signal/value pairs.
func gpuWith(index int, uuid string, kv ...any) GPU {
	g := GPU{UUID: uuid, Index: index}
	for i := 0; i < len(kv); i += 2 {
		g.Values.Set(kv[i].(Signal), kv[i+1].(float64))
	}
	return g
}

func weights(kv ...any) Weights {
	var w Weights
	for i := 0; i < len(kv); i += 2 {
		w[kv[i].(Part)] = int64(kv[i+1].(int))
	}
	return w
}

func devices(model string, n int) []gpu.Device {
	out := make([]gpu.Device, n)
	for i := range out {
		out[i] = gpu.Device{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: model, MemoryMiB: 81920}
	}
	return out
}

func TestScoreNode(t *testing.T) {
	dynamic := weights(Utilization, 3, Memory, 2, Video, 1, Power, 1, DRAM, 1)
	tests := []struct {
		name    string
		devices []gpu.Device
		node    *Node
		k       int
		skip    gpu.DeviceSet
		w       Weights
		want    int64
	}{
		{
			name:    "every dynamic signal",
			devices: devices(a100, 1),
			node: &Node{GPUs: []GPU{gpuWith(0, "GPU-a", GPUUtil, 50.0, FBUsed, 20000.0, FBFree, 60000.0,
				EncUtil, 10.0, DecUtil, 40.0, PowerUsage, 200.0, DRAMActive, 0.2)}},
			k: 1, w: dynamic,
			// util 1-50/100 = 0.5; memory 60000/80000 = 0.75; video 1-max(10,40)/100 = 0.6;
			// power 1-200/400 (A100 SXM board power) = 0.5; dram 1-0.2 = 0.8.
			// (3×0.5 + 2×0.75 + 0.6 + 0.5 + 0.8) / 8 = 4.9/8 = 0.6125 → 612500
			want: 612500,
		},
		{
			name:    "power limit from DCGM wins over the table",
			devices: devices(a100, 1),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", PowerUsage, 200.0, PowerLimit, 250.0)}},
			k:       1, w: weights(Power, 1),
			// 1 - 200/250 = 0.2 → 200000
			want: 200000,
		},
		{
			name:    "no samples: every dynamic part neutral",
			devices: devices(a100, 2),
			k:       1, w: dynamic,
			// (3+2+1+1+1)×0.5 / 8 = 0.5 → 500000
			want: 500000,
		},
		{
			name:    "a GPU missing from the telemetry is neutral",
			devices: devices(a100, 1),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-z", GPUUtil, 100.0)}},
			k:       1, w: weights(Utilization, 1),
			// GPU-a is not in the telemetry (GPU-z is another GPU): 0.5 → 500000
			want: 500000,
		},
		{
			name:    "one GPU: the node's best",
			devices: devices(a100, 2),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", GPUUtil, 90.0), gpuWith(1, "GPU-b", GPUUtil, 10.0)}},
			k:       1, w: weights(Utilization, 1),
			// best of 1-0.9 = 0.1 and 1-0.1 = 0.9 → 900000
			want: 900000,
		},
		{
			name:    "two GPUs: the mean of the two best",
			devices: devices(a100, 2),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", GPUUtil, 90.0), gpuWith(1, "GPU-b", GPUUtil, 10.0)}},
			k:       2, w: weights(Utilization, 1),
			// (0.1 + 0.9) / 2 = 0.5 → 500000
			want: 500000,
		},
		{
			name:    "skipped (unhealthy) GPUs are not scored",
			devices: devices(a100, 2),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", GPUUtil, 90.0), gpuWith(1, "GPU-b", GPUUtil, 10.0)}},
			k:       1, skip: 1 << 1, w: weights(Utilization, 1),
			// only GPU 0: 1 - 0.9 = 0.1 → 100000
			want: 100000,
		},
		{
			name:    "every GPU skipped",
			devices: devices(a100, 1),
			k:       1, skip: 1, w: weights(Utilization, 1),
			want: 0,
		},
		{
			name:    "matched by index when the telemetry has no UUIDs",
			devices: devices(a100, 2),
			node:    &Node{GPUs: []GPU{gpuWith(1, "", GPUUtil, 75.0)}},
			k:       1, w: weights(Utilization, 1),
			// GPU 1: 1 - 0.75 = 0.25; GPU 0 unknown: 0.5; best → 500000
			want: 500000,
		},
		{
			name:    "static bandwidth of an A100 80GB",
			devices: devices(a100, 1),
			k:       1, w: weights(StaticBandwidth, 1),
			// 2039 / 4800 = 0.42479… → 424792
			want: 424792,
		},
		{
			name:    "static compute of a T4",
			devices: devices("Tesla-T4", 1),
			k:       1, w: weights(StaticCompute, 1),
			// 65 / 989 = 0.065723… → 65723
			want: 65723,
		},
		{
			name:    "static memory from the node, unknown model",
			devices: []gpu.Device{{Index: 0, Model: "Mystery-GPU", MemoryMiB: 36 * 1024}},
			k:       1, w: weights(StaticMemory, 1, StaticCompute, 1),
			// memory 36/141 = 0.255319…; compute unknown 0.5; (0.255319 + 0.5)/2 = 0.377660 → 377660
			want: 377660,
		},
		{
			name:    "memory from FB_USED alone and the node's memory size",
			devices: devices(a100, 1),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", FBUsed, 61440.0)}},
			k:       1, w: weights(Memory, 1),
			// 1 - 61440/81920 = 0.25 → 250000
			want: 250000,
		},
		{
			name:    "utilization above 100 clamps to 0",
			devices: devices(a100, 1),
			node:    &Node{GPUs: []GPU{gpuWith(0, "GPU-a", GPUUtil, 130.0)}},
			k:       1, w: weights(Utilization, 1),
			want: 0,
		},
		{
			name:    "MIG: the busiest instance stands for its GPU",
			devices: devices(a100, 1),
			node: &Node{GPUs: []GPU{{UUID: "GPU-a", Index: 0, MIG: []MIGInstance{
				{Profile: "3g.40gb", ID: "1", Values: valuesOf(GPUUtil, 20)}, {Profile: "3g.40gb", ID: "2", Values: valuesOf(GPUUtil, 60)}}}}},
			k: 1, w: weights(Utilization, 1),
			// max(20, 60) = 60: 1 - 0.6 = 0.4 → 400000
			want: 400000,
		},
		{
			name:    "every weight 0",
			devices: devices(a100, 1),
			k:       1,
			want:    500000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ScoreNode(tt.devices, tt.node, tt.k, tt.skip, &tt.w)
			if got.Score != tt.want {
				t.Errorf("score %d, want %d (parts %v)", got.Score, tt.want, got.Parts)
			}
		})
	}
}

func valuesOf(s Signal, v float64) Values {
	var vs Values
	vs.Set(s, v)
	return vs
}

func TestSensitize(t *testing.T) {
	base := weights(Utilization, 3, Memory, 2, Video, 1, Power, 1, DRAM, 1)
	tests := []struct {
		value   string
		want    Weights
		wantErr []string
	}{
		{value: "", want: base},
		// video 1 → max(1,1)×4 = 4
		{value: "video", want: weights(Utilization, 3, Memory, 2, Video, 4, Power, 1, DRAM, 1)},
		// memory 2×4 = 8, dram 1×4 = 4, static bandwidth and memory max(0,1)×4 = 4
		{value: " memory-bound , video", want: weights(Utilization, 3, Memory, 8, Video, 4, Power, 1, DRAM, 4, StaticBandwidth, 4, StaticMemory, 4)},
		// utilization 3×4 = 12, static compute 1×4 = 4; named twice counts once
		{value: "compute-bound,compute-bound", want: weights(Utilization, 12, Memory, 2, Video, 1, Power, 1, DRAM, 1, StaticCompute, 4)},
		{value: "video,gpu", want: base, wantErr: []string{AnnotationSensitiveTo, `"video,gpu"`, `"gpu"`, "compute-bound, memory-bound, power, video"}},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			got, err := Sensitize(base, tt.value, 4)
			if got != tt.want {
				t.Errorf("weights %v, want %v", got, tt.want)
			}
			if (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			for _, part := range tt.wantErr {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not contain %q", err, part)
				}
			}
		})
	}
}

func TestModelOf(t *testing.T) {
	for model, want := range map[string]string{
		"NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB": "A100", "NVIDIA-A10": "A10",
		"NVIDIA-H100-80GB-HBM3": "H100", "NVIDIA-H100-PCIe": "H100-PCIE", "Tesla-T4": "T4", "NVIDIA-L40S": "L40S",
	} {
		if got := ModelOf(model); got == nil || got.Key != want {
			t.Errorf("ModelOf(%q) = %+v, want key %s", model, got, want)
		}
	}
	if got := ModelOf("Mystery"); got != nil {
		t.Errorf("ModelOf(Mystery) = %+v, want nil", got)
	}
}
