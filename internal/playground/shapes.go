package playground

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// DefaultNodes is the --nodes value used when none is given: two 8-GPU
// A100 nodes, one 8-GPU H100 node and two 4-GPU T4 nodes.
const DefaultNodes = "2xA100-80GB:8,1xH100-80GB:8,2xT4-16GB:4"

// NodeShapeForm is the allowed form of one --nodes entry, for messages.
const NodeShapeForm = "<nodes>x<model>-<memory>GB:<GPUs per node>, e.g. 4xA100-80GB:8"

// Limits of a node shape.
const (
	MaxNodesPerShape = 1000
	MaxGPUMemoryGB   = 1024
)

// KwokNodeAnnotation marks the nodes the playground's simulated kubelets
// manage (kwok's convention).
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// NodeShape is a group of identical simulated GPU nodes.
type NodeShape struct {
	// Count is the number of nodes, 1..MaxNodesPerShape.
	Count int
	// Model is the GPU model, the nodes' nvidia.com/gpu.product label,
	// e.g. "A100-80GB".
	Model string
	// MemoryMiB is the memory of each GPU (nvidia.com/gpu.memory), from the
	// model's "-<N>GB" suffix.
	MemoryMiB int64
	// GPUs is the number of GPUs per node, 1..gpu.MaxDevicesPerNode.
	GPUs int
}

// String renders the shape in the --nodes form.
func (s NodeShape) String() string {
	return fmt.Sprintf("%dx%s:%d", s.Count, s.Model, s.GPUs)
}

var (
	shapePattern  = regexp.MustCompile(`^([0-9]+)x(.+):([0-9]+)$`)
	memoryPattern = regexp.MustCompile(`-([0-9]+)GB$`)
)

// ParseNodeShapes parses a --nodes value: comma-separated entries of the form
// NodeShapeForm. The model is any label value that ends in -<N>GB, N being
// the memory of one GPU in GiB (1..MaxGPUMemoryGB). Every error names the
// entry and what is allowed.
func ParseNodeShapes(value string) ([]NodeShape, error) {
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("invalid --nodes %q: want one or more comma-separated %s", value, NodeShapeForm)
	}
	var shapes []NodeShape
	for _, entry := range strings.Split(value, ",") {
		s, err := parseNodeShape(strings.TrimSpace(entry))
		if err != nil {
			return nil, err
		}
		shapes = append(shapes, s)
	}
	return shapes, nil
}

func parseNodeShape(entry string) (NodeShape, error) {
	invalid := func(what string) error {
		return fmt.Errorf("invalid --nodes entry %q: %s; the form is %s", entry, what, NodeShapeForm)
	}
	m := shapePattern.FindStringSubmatch(entry)
	if m == nil {
		return NodeShape{}, invalid("not of the form <nodes>x<model>:<GPUs per node>")
	}
	s := NodeShape{Model: m[2]}
	var err error
	if s.Count, err = strconv.Atoi(m[1]); err != nil || s.Count < 1 || s.Count > MaxNodesPerShape {
		return NodeShape{}, invalid(fmt.Sprintf("%s nodes, allowed 1 to %d", m[1], MaxNodesPerShape))
	}
	if s.GPUs, err = strconv.Atoi(m[3]); err != nil || s.GPUs < 1 || s.GPUs > gpu.MaxDevicesPerNode {
		return NodeShape{}, invalid(fmt.Sprintf("%s GPUs per node, allowed 1 to %d", m[3], gpu.MaxDevicesPerNode))
	}
	if errs := validation.IsValidLabelValue(s.Model); len(errs) > 0 {
		return NodeShape{}, invalid(fmt.Sprintf("model %q is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", s.Model))
	}
	mem := memoryPattern.FindStringSubmatch(s.Model)
	if mem == nil {
		return NodeShape{}, invalid(fmt.Sprintf("model %q does not end in -<memory>GB", s.Model))
	}
	gb, err := strconv.Atoi(mem[1])
	if err != nil || gb < 1 || gb > MaxGPUMemoryGB {
		return NodeShape{}, invalid(fmt.Sprintf("%s GB of GPU memory, allowed 1 to %d", mem[1], MaxGPUMemoryGB))
	}
	s.MemoryMiB = int64(gb) * 1024
	return s, nil
}

// Nodes builds the Node objects of the shapes, in order. Each is named
// after its model and its index among the nodes of that model
// ("a100-80gb-0"), carries the labels GPU Feature Discovery would write for
// its mock GPUs (nvidia.com/gpu.product as the shape's GPUModel, .memory,
// .count) and allocatable nvidia.com/gpu as the device plugin would, 64 CPUs,
// 512 GiB and 110 pods, and the annotation that hands it to the simulated
// kubelets. Status conditions are left to them, and the gpusched.io/gpu-devices
// annotation to the node agents (see agents.go).
func Nodes(shapes []NodeShape) ([]*v1.Node, error) {
	var nodes []*v1.Node
	seq := map[string]int{}
	for _, s := range shapes {
		prefix := strings.ToLower(strings.ReplaceAll(s.Model, "_", "-"))
		for range s.Count {
			name := prefix + "-" + strconv.Itoa(seq[prefix])
			seq[prefix]++
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return nil, fmt.Errorf("node name %q from model %q: %s", name, s.Model, strings.Join(errs, "; "))
			}
			nodes = append(nodes, gpuNode(name, s))
		}
	}
	return nodes, nil
}

// GPUModel is the model the node agent discovers on the shape's mock GPUs
// (see MockGPU), as GPU Feature Discovery writes nvidia.com/gpu.product: the
// one gpusched.io/gpu-models names. "NVIDIA-A100-SXM4-80GB" for A100-80GB,
// the shape's model itself for a GPU go-nvml has no mock of.
func (s NodeShape) GPUModel() string { return discovery.ModelName(s.MockGPU().Name) }

func gpuNode(name string, s NodeShape) *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("64"),
			v1.ResourceMemory: resource.MustParse("512Gi"),
			v1.ResourcePods:   resource.MustParse("110"),
		}},
	}
	setGPUs(node, s)
	node.Status.Capacity = node.Status.Allocatable.DeepCopy()
	return node
}

// setGPUs gives a node the shape's GPUs as the device plugin and GPU
// Feature Discovery would: allocatable nvidia.com/gpu and the labels
// nvidia.com/gpu.product (the shape's GPUModel), .memory (MiB) and .count.
// Capacity is left to the caller.
func setGPUs(node *v1.Node, s NodeShape) {
	node.Status.Allocatable[gpu.ResourceGPU] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	node.Labels[gpu.LabelProduct] = s.GPUModel()
	node.Labels[gpu.LabelMemory] = strconv.FormatInt(s.MemoryMiB, 10)
	node.Labels[gpu.LabelCount] = strconv.Itoa(s.GPUs)
}
