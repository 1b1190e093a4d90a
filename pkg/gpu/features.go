package gpu

import "math"

// NodeFeatures is what an external policy learns of one node for one pod:
// the node's state, the GPUs the engine would give the pod there, and what
// the built-in policy thinks of it. The policy service's requests
// (pkg/policyservice) and the simulator's environment observations are
// both built from it, and its matrix row (AppendRow) is the same in both,
// so that a scorer trained in the simulator reads live requests alike.
type NodeFeatures struct {
	Name string
	// Fits is false for a node the pod does not fit on: its row then holds
	// the node's state, with the columns that depend on the pod 0.
	Fits bool
	// Host is the node's free CPU and memory, with the cluster's largest
	// capacities it is normalized by.
	Host Host
	// AllocatableMilliCPU and AllocatableMemoryMiB are the node's capacity
	// for pods.
	AllocatableMilliCPU  int64
	AllocatableMemoryMiB int64
	// GPUs is the node's GPUs as the pod finds them.
	GPUs []GPUFeatures
	// Chosen are the GPUs the engine gives the pod on this node (the
	// built-in policy's choice); 0 when it does not fit.
	Chosen DeviceSet
	// BuiltinScore is the built-in policy's score for this node, rescaled
	// over the pod's feasible nodes to 0..1 as the scheduler compares it.
	BuiltinScore float64
	// FragmentBefore and FragmentAfter are the node's fragmentation for the
	// policy's typical pods (NodeGPUs.FragmentWithMemory, milli-GPU) before
	// and after the pod is placed on Chosen; 0 for a policy without a
	// distribution of typical pods.
	FragmentBefore, FragmentAfter float64
}

// GPUFeatures is one GPU of a node as a pod finds it.
type GPUFeatures struct {
	Index         int
	Model         string
	FreeMilli     int64
	MemoryMiB     int64
	FreeMemoryMiB int64
	Group         string
}

// Features describes node n for the request's demand (req.Host the node's
// free CPU and memory with the cluster's maxima), given the GPUs the policy
// chose there (Place; fits false when the demand does not fit) and the
// built-in score already rescaled to 0..1. The allocatable CPU and memory
// are the node's.
func (p *Policy) Features(n *NodeGPUs, req *Request, fits bool, chosen DeviceSet, builtin float64, allocMilliCPU, allocMemoryMiB int64) NodeFeatures {
	f, _ := p.AppendFeatures(nil, n, req, fits, chosen, builtin, allocMilliCPU, allocMemoryMiB)
	return f
}

// AppendFeatures is Features with the node's GPUs appended to slab, which
// it returns grown: a front end that describes many nodes passes one slab
// for all of them (one allocation, not one per node). The features' GPUs
// are the slab's last n.Len() entries.
func (p *Policy) AppendFeatures(slab []GPUFeatures, n *NodeGPUs, req *Request, fits bool, chosen DeviceSet, builtin float64, allocMilliCPU, allocMemoryMiB int64) (NodeFeatures, []GPUFeatures) {
	start := len(slab)
	for i := range n.Used {
		dev := &n.Inventory.Devices[i]
		slab = append(slab, GPUFeatures{Index: dev.Index, Model: dev.Model, FreeMilli: n.FreeMilli(i),
			MemoryMiB: dev.MemoryMiB, FreeMemoryMiB: n.FreeMemoryMiB(i), Group: dev.Group})
	}
	f := NodeFeatures{
		Name: n.Name, Fits: fits, Host: req.Host,
		AllocatableMilliCPU: allocMilliCPU, AllocatableMemoryMiB: allocMemoryMiB,
		GPUs: slab[start:len(slab):len(slab)],
	}
	d := req.Demand
	if d == nil {
		d = &noDemand
	}
	if p.shapes != nil && n.Len() > 0 {
		typical := p.shapes.Typical()
		free := freeOf(n)
		f.FragmentBefore = n.fragmentOf(free[:n.Len()], req.Host.free(), typical)
		f.FragmentAfter = f.FragmentBefore
		if fits {
			for i := range n.Used {
				if chosen.Has(i) {
					free[i] -= d.Milli
				}
			}
			f.FragmentAfter = n.fragmentOf(free[:n.Len()], req.Host.after(d), typical)
		}
	}
	if fits {
		f.Chosen, f.BuiltinScore = chosen, builtin
	}
	return f, slab
}

// featureColumns are the columns of a node's matrix row (AppendRow), in
// order. Every value is a fraction, mostly in 0..1: GPU quantities of the
// largest node's GPU capacity, CPU of the largest node's CPU, memory of the
// node's own. A column that depends on the pod (perPod: "after" means once
// the pod is placed on the chosen GPUs) is 0 on a node the pod does not
// fit.
var featureColumns = [numFeatures]struct {
	name   string
	perPod bool
}{
	{BuiltinScoreColumn, true},   // the built-in policy's rescaled score, 0..1
	{"fits", false},              // 1 where the pod fits
	{"free_cpu", false},          // free CPU
	{"free_cpu_after", true},     //
	{"free_memory", false},       // free memory
	{"free_memory_after", true},  //
	{"gpus", false},              // the node's GPUs
	{"free_gpu", false},          // free milli-GPU
	{"free_gpu_after", true},     //
	{"idle_gpus", false},         // GPUs with nothing allocated
	{"idle_gpus_after", true},    //
	{"partial_gpus", false},      // GPUs partly allocated
	{"partial_gpus_after", true}, //
	{"chosen_free_after", true},  // a share: what its GPU keeps free, of one GPU; else 0
	{"chosen_groups", true},      // interconnect groups the chosen GPUs span, of the largest node's GPUs
	{"fragment", false},          // fragmentation for typical pods
	{"fragment_after", true},     //
	{"fragment_delta", true},     // fragment_after − fragment, of one GPU
}

// BuiltinScoreColumn names the column of the built-in policy's score,
// rescaled over the pod's feasible nodes (NodeFeatures.BuiltinScore).
const BuiltinScoreColumn = "builtin_score"

// numFeatures is the number of columns; the arrays of featureColumns and of
// AppendRow's values have this length, so a column added to one but not the
// other does not compile.
const numFeatures = 18

// FeatureColumns names the columns of a node's matrix row (AppendRow), in
// order; docs/policy-service.md#features describes each.
func FeatureColumns() []string {
	out := make([]string, len(featureColumns))
	for i, c := range featureColumns {
		out[i] = c.name
	}
	return out
}

// PolicyScoreColumn names the optional column of the policy's scores (the
// simulator's environment adds it on request, after FeatureColumns).
func PolicyScoreColumn(t PolicyType) string { return string(t) + "_score" }

// AppendRow appends the node's row of FeatureColumns for demand d to dst.
func (f *NodeFeatures) AppendRow(dst []float32, d *Demand) []float32 {
	maxGPUs := f.Host.MaxGPUs
	if maxGPUs <= 0 {
		maxGPUs = len(f.GPUs)
	}
	cpu := float64(max(f.Host.MaxMilliCPU, 1))
	gpuCap := float64(max(int64(maxGPUs)*MilliPerGPU, 1))
	mem := float64(max(f.AllocatableMemoryMiB, 1))
	var freeGPU, freeAfter int64
	var idle, idleAfter, partial, partialAfter int
	chosenFree := 0.0
	groups := 0 // distinct groups of the chosen GPUs
	for i, g := range f.GPUs {
		after := g.FreeMilli
		if f.Chosen.Has(i) {
			after -= d.Milli
			if !f.chosenGroupBefore(i) {
				groups++
			}
			if d.IsShare() {
				chosenFree = float64(after) / MilliPerGPU
			}
		}
		freeGPU += g.FreeMilli
		freeAfter += after
		idle += b2i(g.FreeMilli == MilliPerGPU)
		partial += b2i(g.FreeMilli > 0 && g.FreeMilli < MilliPerGPU)
		idleAfter += b2i(after == MilliPerGPU)
		partialAfter += b2i(after > 0 && after < MilliPerGPU)
	}
	gpuCount := gpuCap / MilliPerGPU
	row := [numFeatures]float64{
		f.BuiltinScore,
		float64(b2i(f.Fits)),
		float64(f.Host.FreeMilliCPU) / cpu,
		float64(f.Host.FreeMilliCPU-d.MilliCPU) / cpu,
		float64(f.Host.FreeMemoryMiB) / mem,
		float64(f.Host.FreeMemoryMiB-d.HostMemoryMiB) / mem,
		float64(len(f.GPUs)) / gpuCount,
		float64(freeGPU) / gpuCap,
		float64(freeAfter) / gpuCap,
		float64(idle) / gpuCount,
		float64(idleAfter) / gpuCount,
		float64(partial) / gpuCount,
		float64(partialAfter) / gpuCount,
		chosenFree,
		float64(groups) / gpuCount,
		f.FragmentBefore / gpuCap,
		f.FragmentAfter / gpuCap,
		(f.FragmentAfter - f.FragmentBefore) / MilliPerGPU,
	}
	for i, v := range row {
		if (!f.Fits && featureColumns[i].perPod) || math.IsNaN(v) || math.IsInf(v, 0) {
			v = 0
		}
		dst = append(dst, float32(v))
	}
	return dst
}

// chosenGroupBefore reports whether a chosen GPU before position i is in
// GPU i's group.
func (f *NodeFeatures) chosenGroupBefore(i int) bool {
	for j := range i {
		if f.Chosen.Has(j) && f.GPUs[j].Group == f.GPUs[i].Group {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
