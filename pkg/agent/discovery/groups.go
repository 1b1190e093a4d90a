package discovery

import (
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// groups sets each GPU's Group from NVLink peering.
//
// Two GPUs are peers when NVML reports NVLink peer-to-peer between them
// (nvmlDeviceGetP2PStatus with the NVLink capability), directly or through
// NVSwitch. Groups are the connected components of that relation:
//
//   - a GPU without any NVLink peer keeps Group "" (PCIe GPUs all share the
//     host bridge, so the engine treats them alike);
//   - the components of two or more GPUs are numbered 0, 1, ... in the order
//     of their lowest NVML index and named "nvlink-<k>";
//   - with a clique (GFD's nvidia.com/gpu.clique on multi-node NVLink
//     systems) the name is the clique itself when the node has one component
//     (so the engine sees the same group as from GFD's labels), and
//     "<clique>-nvlink-<k>" when it has several.
func groups(gpus []GPU, clique string) {
	parent := make([]int, len(gpus))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	linked := make([]bool, len(gpus))
	for i := range gpus {
		for j := i + 1; j < len(gpus); j++ {
			if !nvlinkPeers(gpus[i].handle, gpus[j].handle) {
				continue
			}
			linked[i], linked[j] = true, true
			if a, b := find(i), find(j); a != b {
				parent[max(a, b)] = min(a, b) // the root is the lowest position
			}
		}
	}
	number := map[int]int{} // root -> component number
	for i := range gpus {
		if linked[i] {
			if _, ok := number[find(i)]; !ok {
				number[find(i)] = len(number)
			}
		}
	}
	for i := range gpus {
		gpus[i].Group = ""
		if !linked[i] {
			continue
		}
		k := strconv.Itoa(number[find(i)])
		switch {
		case clique == "":
			gpus[i].Group = "nvlink-" + k
		case len(number) == 1:
			gpus[i].Group = clique
		default:
			gpus[i].Group = clique + "-nvlink-" + k
		}
	}
}

// nvlinkPeers reports whether NVML says a and b reach each other over NVLink.
// Either side may answer; a GPU whose driver does not support the query has
// no peers.
func nvlinkPeers(a, b nvml.Device) bool {
	if a == nil || b == nil {
		return false
	}
	s, ret := a.GetP2PStatus(b, nvml.P2P_CAPS_INDEX_NVLINK)
	return ret == nvml.SUCCESS && s == nvml.P2P_STATUS_OK
}
