package nri

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// demand tells whether a pod has GPU demand, and how. A pod has GPU demand
// when its sandbox carries gpusched.io/gpu-assigned (whatever its value) or
// gpusched.io/gpu-milli (a share asked for by annotation), or when the
// container reaches GPUs by any means the runtime or another device plugin
// gave it:
//   - GPUSCHED_DEVICE_PLUGIN_GPUS, set by the agent's device plugin when the
//     kubelet allocated nvidia.com/gpu;
//   - GPUSCHED_DEVICE_PLUGIN_MILLI, set by the agent's shares device plugin
//     when the kubelet allocated gpusched.io/gpu-milli (a share asked for as
//     a resource, which the sandbox's annotations do not show);
//   - an NVIDIA_VISIBLE_DEVICES other than "", "all", "void" and "none"
//     (what NVIDIA's device plugin sets, or a user's own list);
//   - a CDI device of NVIDIA's vendor (nvidia.com/gpu=...,
//     k8s.device-plugin.nvidia.com/gpu=...), requested or in a cdi.k8s.io/
//     annotation;
//   - a GPU device node /dev/nvidia<N> (a device plugin's device specs);
//   - a mount under /var/run/nvidia-container-devices (a device plugin's
//     volume-mount device list).
//
// NRI hands the plugin the sandbox and the container, not the pod spec, so a
// container's nvidia.com/gpu request is visible only through what a device
// plugin put into the container; a CUDA image's default
// NVIDIA_VISIBLE_DEVICES=all is not demand.
func demand(annotations map[string]string, ctr *api.Container) (bool, string) {
	if _, ok := annotations[gpu.AnnotationAssigned]; ok {
		return true, gpu.AnnotationAssigned + " is set"
	}
	if _, ok := annotations[gpu.AnnotationMilli]; ok {
		return true, gpu.AnnotationMilli + " is set"
	}
	for _, kv := range ctr.GetEnv() {
		key, value, _ := strings.Cut(kv, "=")
		switch {
		case key == EnvDevicePluginGPUs:
			return true, "the kubelet allocated " + string(gpu.ResourceGPU)
		case key == EnvDevicePluginMilli:
			return true, "the kubelet allocated " + string(gpu.ResourceMilli)
		case key == EnvVisibleDevices && value != "" && value != "all" && value != "void" && value != "none":
			return true, EnvVisibleDevices + "=" + value + " is set"
		}
	}
	for _, c := range ctr.GetCDIDevices() {
		if nvidiaCDIDevice(c.GetName()) {
			return true, "CDI device " + c.GetName() + " is requested"
		}
	}
	for _, key := range sortedKeys(ctr.GetAnnotations()) {
		if cdiAnnotationNamesGPU(key, ctr.GetAnnotations()[key]) {
			return true, "annotation " + key + "=" + ctr.GetAnnotations()[key] + " asks for CDI devices"
		}
	}
	for _, dev := range ctr.GetLinux().GetDevices() {
		if _, ok := gpuDeviceNode(dev); ok {
			return true, "device node " + dev.GetPath() + " is in the container"
		}
	}
	for _, m := range ctr.GetMounts() {
		if deviceListMount(m.GetDestination()) {
			return true, "device list " + m.GetDestination() + " is mounted"
		}
	}
	return false, ""
}

// confine keeps the container from reaching GPUs other than those of
// minors (the /dev/nvidia<minor> numbers of the GPUs the agent gives it; -1
// for one whose minor is unknown). It denies, in the device cgroup, every
// other GPU of the node and every GPU device node the container carries
// beyond its own, so that neither a device node a device plugin passed nor
// one the container makes itself (CAP_MKNOD) opens; and it removes OCI
// annotations that ask for NVIDIA CDI devices. A container without GPUs is
// denied every character device of major 195 (GPUs, nvidiactl,
// nvidia-modeset).
//
// It also asks the runtime to remove the foreign device nodes, but NRI
// (v0.11 to v0.12) applies a plugin's removal of a device, mount or variable
// only to what an earlier plugin added, so the node may stay in the spec:
// the device-cgroup rule is what denies it. For the same reason a foreign
// device-list mount cannot be removed and is refused instead (see
// foreignDeviceList).
//
// What the agent gives (CDI devices, or the NVIDIA runtime's hook acting on
// NVIDIA_VISIBLE_DEVICES) comes on top: the runtime injects CDI devices
// before it applies device changes, which is why the GPUs of minors are
// never touched here.
func confine(adj *api.ContainerAdjustment, snap *discovery.Snapshot, ctr *api.Container, minors []int) {
	for _, key := range sortedKeys(ctr.GetAnnotations()) {
		if cdiAnnotationNamesGPU(key, ctr.GetAnnotations()[key]) {
			adj.RemoveAnnotation(key)
		}
	}
	if minors == nil {
		for _, dev := range ctr.GetLinux().GetDevices() {
			if _, ok := gpuDeviceNode(dev); ok {
				adj.RemoveDevice(dev.GetPath())
			}
		}
		denyDevice(adj, gpuMajor, nil)
		return
	}
	type node struct{ major, minor int64 }
	var foreign []node
	deny := func(major, minor int64) {
		if !slices.Contains(foreign, node{major, minor}) {
			foreign = append(foreign, node{major, minor})
		}
	}
	if snap != nil {
		for _, m := range snap.Minors {
			if m >= 0 && !slices.Contains(minors, m) {
				deny(gpuMajor, int64(m))
			}
		}
	}
	for _, dev := range ctr.GetLinux().GetDevices() {
		m, ok := gpuDeviceNode(dev)
		if !ok || slices.Contains(minors, m) {
			continue
		}
		adj.RemoveDevice(dev.GetPath())
		deny(gpuMajor, int64(m))
		if dev.GetType() == "c" && dev.GetMajor() != gpuMajor {
			deny(dev.GetMajor(), dev.GetMinor())
		}
	}
	slices.SortFunc(foreign, func(a, b node) int {
		if a.major != b.major {
			return int(a.major - b.major)
		}
		return int(a.minor - b.minor)
	})
	for _, n := range foreign {
		denyDevice(adj, n.major, &api.OptionalInt64{Value: n.minor})
	}
}

// foreignDeviceList returns the first mount of NVIDIA's volume-mount device
// list (/var/run/nvidia-container-devices/<GPU>) that names a GPU other
// than uuids and their indices, or "". The NVIDIA runtime gives the
// container every GPU so named, and the agent cannot remove the mount.
func foreignDeviceList(ctr *api.Container, uuids []string, indices []int) string {
	for _, m := range ctr.GetMounts() {
		if !deviceListMount(m.GetDestination()) {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(filepath.Clean(m.GetDestination()), deviceListDir), "/")
		if slices.Contains(uuids, name) || slices.ContainsFunc(indices, func(i int) bool { return strconv.Itoa(i) == name }) {
			continue
		}
		return m.GetDestination()
	}
	return ""
}

// denyDevice appends a device-cgroup rule that denies the character device
// major:minor (every minor of major when minor is nil). Device rules apply
// in order, so a deny after the runtime's allows wins.
func denyDevice(adj *api.ContainerAdjustment, major int64, minor *api.OptionalInt64) {
	if adj.Linux == nil {
		adj.Linux = &api.LinuxContainerAdjustment{}
	}
	if adj.Linux.Resources == nil {
		adj.Linux.Resources = &api.LinuxResources{}
	}
	adj.Linux.Resources.Devices = append(adj.Linux.Resources.Devices, &api.LinuxDeviceCgroup{
		Allow: false, Type: "c", Major: &api.OptionalInt64{Value: major}, Minor: minor, Access: "rwm",
	})
}

// gpuDeviceNode reports whether dev is a GPU's device node, and its minor:
// a character device of major 195 below nvidia-modeset's minor 254,
// whatever its path, or a node at /dev/nvidia<N> (minor N unless the device
// says otherwise).
func gpuDeviceNode(dev *api.LinuxDevice) (int, bool) {
	if dev.GetType() == "c" && dev.GetMajor() == gpuMajor {
		return int(dev.GetMinor()), dev.GetMinor() >= 0 && dev.GetMinor() < gpuControlMinors
	}
	digits, ok := strings.CutPrefix(filepath.Clean(dev.GetPath()), "/dev/nvidia")
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
		return 0, false
	}
	return n, true
}

// nvidiaCDIDevice reports whether a fully qualified CDI device name
// (vendor/class=name) is of NVIDIA's vendor or one of its subdomains.
func nvidiaCDIDevice(name string) bool {
	kind, _, ok := strings.Cut(name, "=")
	if !ok {
		return false
	}
	vendor, _, ok := strings.Cut(kind, "/")
	return ok && (vendor == cdiVendor || strings.HasSuffix(vendor, "."+cdiVendor))
}

// cdiAnnotationNamesGPU reports whether an OCI annotation asks for an NVIDIA
// CDI device: a key under cdi.k8s.io/ (or a vendor's <x>.cdi.k8s.io/) whose
// comma-separated value names one.
func cdiAnnotationNamesGPU(key, value string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok || (prefix+"/" != cdiAnnotationPrefix && !strings.HasSuffix(prefix+"/", "."+cdiAnnotationPrefix)) {
		return false
	}
	for name := range strings.SplitSeq(value, ",") {
		if nvidiaCDIDevice(strings.TrimSpace(name)) {
			return true
		}
	}
	return false
}

// deviceListMount reports whether a container path is in NVIDIA's
// volume-mount device list.
func deviceListMount(dest string) bool {
	dest = filepath.Clean(dest)
	return dest == deviceListDir || strings.HasPrefix(dest, deviceListDir+"/")
}

func sortedKeys(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
