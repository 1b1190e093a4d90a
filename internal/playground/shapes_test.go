package playground

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

func TestParseNodeShapes(t *testing.T) {
	got, err := ParseNodeShapes(" 4xA100-80GB:8, 2xT4-16GB:4,1xL4_x.2-24GB:1")
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeShape{
		{Count: 4, Model: "A100-80GB", MemoryMiB: 80 * 1024, GPUs: 8},
		{Count: 2, Model: "T4-16GB", MemoryMiB: 16 * 1024, GPUs: 4},
		{Count: 1, Model: "L4_x.2-24GB", MemoryMiB: 24 * 1024, GPUs: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("shape %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := ParseNodeShapes(DefaultNodes); err != nil {
		t.Errorf("DefaultNodes: %v", err)
	}
}

func TestParseNodeShapesErrors(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string // besides the value, which every message names
	}{
		{"", "want one or more comma-separated"},
		{"4A100-80GB:8", "not of the form <nodes>x<model>:<GPUs per node>"},
		{"4xA100-80GB", "not of the form"},
		{"4xA100-80GB:8,", `entry ""`},
		{"0xA100-80GB:8", "0 nodes, allowed 1 to 1000"},
		{"1001xA100-80GB:8", "1001 nodes, allowed 1 to 1000"},
		{"4xA100-80GB:0", "0 GPUs per node, allowed 1 to 64"},
		{"4xA100-80GB:65", "65 GPUs per node, allowed 1 to 64"},
		{"4xA100:8", `model "A100" does not end in -<memory>GB`},
		{"4xA100-80gb:8", "does not end in -<memory>GB"},
		{"4xA100-0GB:8", "0 GB of GPU memory, allowed 1 to 1024"},
		{"4xA100-2048GB:8", "2048 GB of GPU memory, allowed 1 to 1024"},
		{"4xA100 80GB:8", `model "A100 80GB" is not a label value`},
		{"4x-A100-80GB:8", "is not a label value"},
	} {
		_, err := ParseNodeShapes(tc.value)
		if err == nil {
			t.Errorf("%q: no error", tc.value)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "--nodes") || !strings.Contains(msg, tc.want) || !strings.Contains(msg, NodeShapeForm) {
			t.Errorf("%q: error %q should name --nodes, say %q and give the form", tc.value, msg, tc.want)
		}
		if tc.value != "" && !strings.Contains(msg, `"`+strings.TrimSpace(strings.Split(tc.value, ",")[0])) && !strings.Contains(msg, `entry ""`) {
			t.Errorf("%q: error %q does not name the entry", tc.value, msg)
		}
	}
}

func TestNodes(t *testing.T) {
	shapes, err := ParseNodeShapes("2xA100-80GB:8,1xT4-16GB:4,1xA100-80GB:2")
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := Nodes(shapes)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if got, want := strings.Join(names, " "), "a100-80gb-0 a100-80gb-1 t4-16gb-0 a100-80gb-2"; got != want {
		t.Errorf("names %q, want %q", got, want)
	}
	t4 := nodes[2]
	for key, want := range map[string]string{gpu.LabelProduct: "T4-16GB", gpu.LabelMemory: "16384", gpu.LabelCount: "4"} {
		if got := t4.Labels[key]; got != want {
			t.Errorf("label %s = %q, want %q", key, got, want)
		}
	}
	if q := t4.Status.Allocatable[gpu.ResourceGPU]; q.Value() != 4 {
		t.Errorf("allocatable %s = %s, want 4", gpu.ResourceGPU, q.String())
	}
	if t4.Annotations[KwokNodeAnnotation] != "fake" {
		t.Errorf("node not handed to the simulated kubelets: %v", t4.Annotations)
	}
	// The engine reads these nodes' GPUs as the flag describes them.
	inv, err := gpu.InventoryFromNode(t4)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 4 || inv.Devices[3].Model != "T4-16GB" || inv.Devices[3].MemoryMiB != 16384 {
		t.Errorf("inventory %+v", inv.Devices)
	}
}

// TestAgentDiscoversShapes: the node agent's discovery on a shape's mock
// machine finds the shape's GPUs: go-nvml's mock of the model when it has
// one (NVML's product name; SXM GPUs all NVLink peers), matched without
// regard to case, and for T4-16GB, which go-nvml does not mock, plain GPUs
// under the shape's own model name.
func TestAgentDiscoversShapes(t *testing.T) {
	shapes, err := ParseNodeShapes("1xA100-80GB:8,1xT4-16GB:4,1xH200-141GB:2,1xa30-24GB:2")
	if err != nil {
		t.Fatal(err)
	}
	for k, tc := range []struct {
		model string
		group string
	}{
		{model: "NVIDIA-A100-SXM4-80GB", group: "nvlink-0"},
		{model: "T4-16GB", group: ""},
		{model: "NVIDIA-H200-141GB-HBM3e", group: "nvlink-0"},
		{model: "NVIDIA-A30-PCIE-24GB", group: ""}, // a PCIe card: no NVLink
	} {
		s := shapes[k]
		if got := s.GPUModel(); got != tc.model {
			t.Errorf("%s: GPUModel %q, want %q", s, got, tc.model)
		}
		m, err := s.machine(k)
		if err != nil {
			t.Fatal(err)
		}
		found, err := discovery.Discover(m, discovery.Options{})
		if err != nil {
			t.Fatal(err)
		}
		devices := found.Devices()
		if len(devices) != s.GPUs {
			t.Fatalf("%s: discovered %d GPUs, want %d", s, len(devices), s.GPUs)
		}
		for i, d := range devices {
			want := gpu.Device{Index: i, UUID: nvmlmock.MachineUUID(k, i), Model: tc.model, MemoryMiB: s.MemoryMiB, Group: tc.group}
			if d != want {
				t.Errorf("%s: device %d = %+v, want %+v", s, i, d, want)
			}
		}
	}
}
