package playground

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TraceGPUMemoryGB is the memory of one GPU, in GiB, of each model the
// Alibaba GPU trace (cluster-trace-gpu-v2023) names in its node list. The
// trace gives models only; the mock GPUs the node agents discover need a
// memory:
//
//   - A10: 24 GB; P100: 16 GB (the PCIe card's larger size); T4: 16 GB;
//     V100M16 and V100M32: 16 and 32 GB, as their names say.
//   - G1, G2, G3: the trace's undisclosed internal codes. Assumed 32 GB each.
//     The trace's pods ask for no GPU memory (only gpu_milli), so the
//     assumption changes no trace pod's placement; it bounds only pods
//     that add gpusched.io/gpu-memory.
//
// Keys are matched without regard to case.
var TraceGPUMemoryGB = map[string]int64{
	"A10":     24,
	"P100":    16,
	"T4":      16,
	"V100M16": 16,
	"V100M32": 32,
	"G1":      32,
	"G2":      32,
	"G3":      32,
}

// ListedNode is one node of a --nodes-from list: the Node object the
// playground creates and the GPUs its node agent discovers.
type ListedNode struct {
	Node *v1.Node
	// GPUs describes the node's mock GPUs with Count 1; GPUs.GPUs is 0 for a
	// node without GPUs, which gets no node agent.
	GPUs NodeShape
}

// LoadNodeList reads a --nodes-from file with trace.LoadNodes: the
// Alibaba trace's node CSV (sn,cpu_milli,memory_mib,gpu,model; a .csv
// file) or Node objects (.yaml, .yml, .json: `kubectl get nodes -o yaml`,
// a List or ----separated Nodes), and maps each node onto a simulated one
// (see ListNode). Every error names the file; one about a node names it, the
// field, its value and what is allowed, with the line for a CSV row.
func LoadNodeList(path string) ([]ListedNode, error) {
	nodes, err := trace.LoadNodes(path)
	if err != nil {
		return nil, fmt.Errorf("invalid --nodes-from: %w", err)
	}
	lines := map[string]int{}
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		lines = csvNodeLines(path)
	}
	out := make([]ListedNode, 0, len(nodes))
	for _, n := range nodes {
		l, err := ListNode(n)
		if err != nil {
			where := path
			if line := lines[n.Name]; line > 0 {
				where += ":" + strconv.Itoa(line)
			}
			return nil, fmt.Errorf("invalid --nodes-from: %s: node %q: %w", where, n.Name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// csvNodeLines maps each row's first field (the node name) to its line.
// The file has been read and checked by trace.LoadNodes already.
func csvNodeLines(path string) map[string]int {
	lines := map[string]int{}
	data, err := os.ReadFile(path)
	if err != nil {
		return lines
	}
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	for {
		rec, err := r.Read()
		if err == io.EOF || err != nil {
			return lines
		}
		if len(rec) > 0 {
			line, _ := r.FieldPos(0)
			lines[strings.TrimSpace(rec[0])] = line
		}
	}
}

// ListNode maps a loaded Node onto a simulated node:
//
//   - GPUs: the node's inventory as the scheduler reads it
//     (gpu.InventoryFromNode: the gpusched.io/gpu-devices annotation,
//     else allocatable nvidia.com/gpu, else the nvidia.com/gpu.count label),
//     all of one model (nvidia.com/gpu.product, or the trace's model column).
//   - Memory per GPU: go-nvml's mock's for a model of nvmlmock.Catalog
//     (as in --nodes), else the devices' or the nvidia.com/gpu.memory label's,
//     else TraceGPUMemoryGB's for the model, else the model's "-<N>GB"
//     suffix as in --nodes; a model with none of these is an error.
//   - CPU, memory, pods and other resources: the node's allocatable
//     (capacity when it has none); negative values are errors. A node that
//     gives no pod count gets 110, the kubelet's default.
//   - Name, labels and taints are kept, except node.kubernetes.io/ taints
//     (the node's conditions, which the simulated kubelet now owns); the
//     GPU labels are rewritten as gpuNode writes them; annotations and status
//     are dropped and KwokNodeAnnotation added.
func ListNode(in *v1.Node) (ListedNode, error) {
	resources := in.Status.Allocatable
	if len(resources) == 0 {
		resources = in.Status.Capacity
	}
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		if q := resources[name]; q.Sign() < 0 {
			return ListedNode{}, fmt.Errorf("allocatable %s %s: want a quantity of at least 0", name, q.String())
		}
	}
	inv, err := gpu.InventoryFromNode(in)
	if err != nil {
		return ListedNode{}, err
	}
	shape := NodeShape{Count: 1, GPUs: len(inv.Devices)}
	if shape.GPUs > 0 {
		d := inv.Devices[0]
		for _, o := range inv.Devices[1:] {
			if o.Model != d.Model {
				return ListedNode{}, fmt.Errorf("GPUs of models %q and %q: a simulated node has GPUs of one model", d.Model, o.Model)
			}
		}
		if shape.Model, shape.MemoryMiB, err = gpuModelMemory(d.Model, d.MemoryMiB); err != nil {
			return ListedNode{}, err
		}
		if cfg, ok := nvmlmock.Lookup(shape.Model); ok {
			shape.MemoryMiB = int64(cfg.MemoryMB) // what the agent discovers on go-nvml's mock
		}
	}

	allocatable := resources.DeepCopy()
	if allocatable == nil {
		allocatable = v1.ResourceList{}
	}
	delete(allocatable, gpu.ResourceGPU)
	if _, ok := allocatable[v1.ResourcePods]; !ok {
		allocatable[v1.ResourcePods] = resource.MustParse("110")
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        in.Name,
			Labels:      maps.Clone(in.Labels),
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Status: v1.NodeStatus{Allocatable: allocatable},
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for _, key := range []string{gpu.LabelProduct, gpu.LabelMemory, gpu.LabelCount} {
		delete(node.Labels, key)
	}
	node.Labels[v1.LabelHostname] = in.Name
	for _, t := range in.Spec.Taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			node.Spec.Taints = append(node.Spec.Taints, t)
		}
	}
	if shape.GPUs > 0 {
		setGPUs(node, shape)
	}
	node.Status.Capacity = node.Status.Allocatable.DeepCopy()
	return ListedNode{Node: node, GPUs: shape}, nil
}

// gpuModelMemory checks a listed node's GPU model and finds its memory per
// GPU in MiB (see ListNode).
func gpuModelMemory(model string, memoryMiB int64) (string, int64, error) {
	if model == "" {
		return "", 0, fmt.Errorf("GPUs without a model: want the label %s (or the trace's model column)", gpu.LabelProduct)
	}
	if memoryMiB > 0 {
		return model, memoryMiB, nil
	}
	for name, gb := range TraceGPUMemoryGB {
		if strings.EqualFold(name, model) {
			return model, gb * 1024, nil
		}
	}
	if m := memoryPattern.FindStringSubmatch(model); m != nil {
		if gb, err := strconv.Atoi(m[1]); err == nil && gb >= 1 && gb <= MaxGPUMemoryGB {
			return model, int64(gb) * 1024, nil
		}
	}
	return "", 0, fmt.Errorf("GPU model %q: its memory per GPU is unknown; want a %s label (MiB), a model of the trace (%s), or a model ending in -<N>GB (N 1 to %d)",
		model, gpu.LabelMemory, strings.Join(slices.Sorted(maps.Keys(TraceGPUMemoryGB)), ", "), MaxGPUMemoryGB)
}

// NodeListShapes groups the listed nodes with GPUs into shapes of identical
// GPUs (model, memory, GPUs per node), largest group first, for the demo's
// workload and the start-up line.
func NodeListShapes(list []ListedNode) []NodeShape {
	index := map[NodeShape]int{}
	var shapes []NodeShape
	for _, l := range list {
		if l.GPUs.GPUs == 0 {
			continue
		}
		key := NodeShape{Model: l.GPUs.Model, MemoryMiB: l.GPUs.MemoryMiB, GPUs: l.GPUs.GPUs}
		i, ok := index[key]
		if !ok {
			i = len(shapes)
			index[key] = i
			shapes = append(shapes, key)
		}
		shapes[i].Count++
	}
	slices.SortStableFunc(shapes, func(a, b NodeShape) int { return b.Count - a.Count })
	return shapes
}
