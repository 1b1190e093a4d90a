// Package policyservice is gpusched's side of the policy service
// (proto/gpusched/policy/v1alpha1): the messages built from the engine's
// node features (gpu.NodeFeatures), and the client that asks an external
// scorer, with its deadline, fallback, circuit breaker, shadow mode and
// metrics (docs/policy-service.md). The GPUPlacement plugin, the extender
// and the simulator's environment build their messages here.
package policyservice

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// PodMessage is the pod as the protocol describes it: its demand as the
// policy reads it (gpu.Policy.Demand) and its priority.
func PodMessage(pod *v1.Pod, d *gpu.Demand) *pb.Pod {
	out := &pb.Pod{
		Namespace: pod.Namespace, Name: pod.Name, Uid: string(pod.UID),
		Gpus: int32(d.Count), MilliGpu: d.Milli, GpuMemoryMib: d.MemoryMiB,
		Models:   d.Models,
		MilliCpu: d.MilliCPU, MemoryMib: d.HostMemoryMiB,
	}
	if out.MilliCpu == 0 && out.MemoryMib == 0 {
		out.MilliCpu, out.MemoryMib = gpu.PodMilliCPU(pod), gpu.PodMemoryMiB(pod)
	}
	if pod.Spec.Priority != nil {
		out.Priority = *pod.Spec.Priority
	}
	return out
}

// NodeMessage is one node's features as the protocol describes them; the
// GPUs' models and groups are indexed in t, which the request carries.
func NodeMessage(f *gpu.NodeFeatures, t *Tables) *pb.Node {
	n := len(f.GPUs)
	out := &pb.Node{
		Name:                 f.Name,
		AllocatableMilliCpu:  f.AllocatableMilliCPU,
		AllocatableMemoryMib: f.AllocatableMemoryMiB,
		FreeMilliCpu:         f.Host.FreeMilliCPU,
		FreeMemoryMib:        f.Host.FreeMemoryMiB,
		GpuIndex:             make([]int32, n),
		GpuModel:             make([]int32, n),
		GpuFreeMilli:         make([]int64, n),
		GpuMemoryMib:         make([]int64, n),
		GpuFreeMemoryMib:     make([]int64, n),
		GpuGroup:             make([]int32, n),
		BuiltinScore:         f.BuiltinScore,
	}
	for i, g := range f.GPUs {
		out.GpuIndex[i], out.GpuModel[i], out.GpuGroup[i] = int32(g.Index), t.model(g.Model), t.group(g.Group)
		out.GpuFreeMilli[i], out.GpuMemoryMib[i], out.GpuFreeMemoryMib[i] = g.FreeMilli, g.MemoryMiB, g.FreeMemoryMiB
		if f.Chosen.Has(i) {
			out.Chosen = append(out.Chosen, int32(g.Index))
		}
	}
	return out
}

// Tables are the GPU models and interconnect groups of a request's nodes,
// each named once and indexed by Node.gpu_model and Node.gpu_group.
type Tables struct {
	Models, Groups []string
	models, groups map[string]int32
}

func (t *Tables) model(name string) int32 { return index(&t.Models, &t.models, name) }
func (t *Tables) group(name string) int32 { return index(&t.Groups, &t.groups, name) }

func index(list *[]string, byName *map[string]int32, name string) int32 {
	if i, ok := (*byName)[name]; ok {
		return i
	}
	if *byName == nil {
		*byName = map[string]int32{}
	}
	i := int32(len(*list))
	*list = append(*list, name)
	(*byName)[name] = i
	return i
}

// Matrix is the nodes' rows of gpu.FeatureColumns for demand d, as the
// protocol carries them: row-major little-endian float32. buf, when large
// enough, is reused for the values.
func Matrix(nodes []gpu.NodeFeatures, d *gpu.Demand, buf []byte) *pb.FeatureMatrix {
	columns := gpu.FeatureColumns()
	row := make([]float32, 0, len(columns))
	size := 4 * len(columns) * len(nodes)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:0]
	for i := range nodes {
		row = nodes[i].AppendRow(row[:0], d)
		buf = appendRow(buf, row)
	}
	return &pb.FeatureMatrix{Columns: columns, Rows: int32(len(nodes)), Values: buf}
}
