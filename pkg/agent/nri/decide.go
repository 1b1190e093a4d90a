package nri

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// Mode is how a container is given its GPUs.
type Mode string

const (
	// ModeCDI adds CDI devices nvidia.com/gpu=<UUID>, for runtimes that apply
	// CDI adjustments from NRI (containerd >= 2.1, CRI-O >= 1.34) with a CDI
	// spec that names GPUs by UUID (nvidia-ctk cdi generate
	// --device-name-strategy=uuid). NVIDIA_VISIBLE_DEVICES is set to void, so
	// the NVIDIA runtime's legacy hook adds nothing on top.
	ModeCDI Mode = "cdi"
	// ModeEnv sets NVIDIA_VISIBLE_DEVICES=<UUID>,... for the NVIDIA container
	// runtime (nvidia-container-toolkit) to act on.
	ModeEnv Mode = "env"
)

// Environment variables the agent reads or writes.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvDevicePluginGPUs is set by the agent's own device plugin (Allocate)
	// on every container the kubelet gave nvidia.com/gpu; its presence tells
	// the NRI step that the container asked for whole GPUs.
	EnvDevicePluginGPUs = "GPUSCHED_DEVICE_PLUGIN_GPUS"
	EnvMPSThreads       = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSMemLimit      = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSPipeDir       = "CUDA_MPS_PIPE_DIRECTORY"
	// cdiKind is the CDI kind of NVIDIA's GPUs.
	cdiKind = "nvidia.com/gpu"
)

// Rejection reasons, stable strings (the metrics' "reason" label).
const (
	ReasonMissing     = "missing_assignment"
	ReasonMalformed   = "malformed_assignment"
	ReasonForeignNode = "foreign_node"
	ReasonUnknownGPU  = "unknown_gpu"
	ReasonNoInventory = "no_inventory"
)

// Config is the plugin's configuration.
type Config struct {
	// NodeName is this node; an assignment must name it.
	NodeName string
	// Mode is ModeCDI or ModeEnv.
	Mode Mode
	// MPSPipeDir, when set, is the host directory of the MPS control
	// daemon's pipes: shares then get MPS limits and the directory mounted.
	MPSPipeDir string
	// UnrestrictedNamespaces are left untouched: their containers see what
	// the runtime gives them (for NVIDIA's own pods: DCGM exporter, GFD, the
	// driver and toolkit containers, and the agent itself).
	UnrestrictedNamespaces []string
}

// Validate checks the configuration and names the field that is wrong.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("node name is empty: set NODE_NAME or --node-name")
	case c.Mode != ModeCDI && c.Mode != ModeEnv:
		return fmt.Errorf("mode %q: want %q or %q", c.Mode, ModeCDI, ModeEnv)
	case c.MPSPipeDir != "" && !filepath.IsAbs(c.MPSPipeDir):
		return fmt.Errorf("MPS pipe directory %q: want an absolute path", c.MPSPipeDir)
	}
	return nil
}

// RejectError is a refused container creation. Its message names the pod,
// the annotation and what is wrong; the runtime reports it as the reason the
// container could not be created (kubectl describe pod shows it).
type RejectError struct {
	// Pod is "namespace/name".
	Pod string
	// Reason is one of the Reason* constants.
	Reason string
	// Detail says what is wrong and what would be right.
	Detail string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("gpusched: pod %s: %s: %s", e.Pod, gpu.AnnotationAssigned, e.Detail)
}

// Decision is what one container is given.
type Decision struct {
	// GPUPod is whether the pod has GPU demand; Why says how it was told.
	GPUPod bool
	Why    string
	// Exempt: the pod's namespace is unrestricted; nothing is changed.
	Exempt bool
	// UUIDs are the GPUs the container gets (none for a pod without GPUs).
	UUIDs []string
	// Assignment is the pod's parsed assignment (GPU pods only).
	Assignment gpu.Assignment
	// Adjust is the NRI adjustment (nil when Exempt).
	Adjust *api.ContainerAdjustment
}

// Decide works out what a container of pod is given, from the pod sandbox's
// annotations, the container's environment and the node's current GPUs. It
// makes no API call. It never panics; a GPU pod whose assignment cannot be
// honoured gets a *RejectError.
//
// A pod has GPU demand when any of these holds:
//   - its sandbox carries gpusched.io/gpu-assigned (whatever its value);
//   - its sandbox carries gpusched.io/gpu-milli (a share; shares use no
//     extended resource, so only the annotation tells);
//   - the container carries GPUSCHED_DEVICE_PLUGIN_GPUS, set by the agent's
//     device plugin when the kubelet allocated nvidia.com/gpu to it;
//   - the container carries CDI devices of kind nvidia.com/gpu, or an
//     NVIDIA_VISIBLE_DEVICES other than "", "all", "void" and "none" (what
//     NVIDIA's device plugin sets, or what a user wrote to reach GPUs without
//     asking the scheduler).
//
// NRI hands the plugin the sandbox and the container, not the pod spec, so a
// container's nvidia.com/gpu request is visible only through what a device
// plugin put into the container; a CUDA image's default
// NVIDIA_VISIBLE_DEVICES=all is not demand. Every container of a GPU pod gets
// the pod's GPUs: gpusched assigns GPUs to pods, not to containers.
func Decide(cfg *Config, snap *discovery.Snapshot, pod *api.PodSandbox, ctr *api.Container) (Decision, error) {
	podName := pod.GetNamespace() + "/" + pod.GetName()
	if slices.Contains(cfg.UnrestrictedNamespaces, pod.GetNamespace()) {
		return Decision{Exempt: true}, nil
	}
	annotations := pod.GetAnnotations()
	raw, assigned := annotations[gpu.AnnotationAssigned]
	d := Decision{Adjust: &api.ContainerAdjustment{}}
	d.GPUPod, d.Why = demand(annotations, ctr)
	if !d.GPUPod {
		d.Adjust.AddEnv(EnvVisibleDevices, "void")
		return d, nil
	}
	reject := func(reason, format string, args ...any) (Decision, error) {
		return Decision{GPUPod: true, Why: d.Why}, &RejectError{Pod: podName, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if !assigned {
		return reject(ReasonMissing, "the pod asks for GPUs (%s) but has no assignment; it was not placed by gpusched "+
			"(check spec.schedulerName), or the annotation was removed", d.Why)
	}
	a, err := gpu.ParseAssignment(raw)
	if err != nil {
		return reject(ReasonMalformed, "%v", err)
	}
	if a.Node != cfg.NodeName {
		return reject(ReasonForeignNode, "the assignment names node %q, but the container is being created on node %q", a.Node, cfg.NodeName)
	}
	if snap == nil {
		return reject(ReasonNoInventory, "node %s has not discovered its GPUs yet; the kubelet will retry", cfg.NodeName)
	}
	d.Assignment = a
	for i, index := range a.Devices {
		dev, ok := snap.ByIndex(index)
		if !ok {
			return reject(ReasonUnknownGPU, "GPU index %d is not on node %s, which has %d GPUs%s", index, cfg.NodeName, len(snap.Devices), elsewhere(snap, a, i))
		}
		if dev.UUID == "" {
			return reject(ReasonUnknownGPU, "GPU index %d on node %s has no known UUID", index, cfg.NodeName)
		}
		if a.UUIDs != nil && a.UUIDs[i] != dev.UUID {
			return reject(ReasonUnknownGPU, "GPU index %d is %s on node %s, but the assignment names %s%s", index, dev.UUID, cfg.NodeName, a.UUIDs[i], elsewhere(snap, a, i))
		}
		d.UUIDs = append(d.UUIDs, dev.UUID)
	}
	give(cfg, &d)
	return d, nil
}

// demand tells whether a pod has GPU demand (see Decide), and how.
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
		case key == EnvVisibleDevices && value != "" && value != "all" && value != "void" && value != "none":
			return true, EnvVisibleDevices + "=" + value + " is set"
		}
	}
	for _, c := range ctr.GetCDIDevices() {
		if strings.HasPrefix(c.GetName(), cdiKind+"=") {
			return true, "CDI device " + c.GetName() + " is requested"
		}
	}
	return false, ""
}

// elsewhere says where the i-th assigned UUID is on this node, when it is
// at another index (GPUs renumbered after one was lost).
func elsewhere(snap *discovery.Snapshot, a gpu.Assignment, i int) string {
	if a.UUIDs == nil {
		return ""
	}
	if dev, ok := snap.ByUUID(a.UUIDs[i]); ok {
		return fmt.Sprintf(" (%s is GPU index %d here: the node's GPUs changed after the pod was placed)", a.UUIDs[i], dev.Index)
	}
	return ""
}

// give fills d.Adjust with the GPUs d.UUIDs and, for a share on an MPS node,
// the MPS limits.
func give(cfg *Config, d *Decision) {
	if cfg.Mode == ModeCDI {
		for _, u := range d.UUIDs {
			d.Adjust.AddCDIDevice(&api.CDIDevice{Name: cdiKind + "=" + u})
		}
		d.Adjust.AddEnv(EnvVisibleDevices, "void")
	} else {
		d.Adjust.AddEnv(EnvVisibleDevices, strings.Join(d.UUIDs, ","))
	}
	if cfg.MPSPipeDir == "" || d.Assignment.Milli >= gpu.MilliPerGPU {
		return
	}
	// Percent of the GPU's SMs, rounded up so a 1-milli share gets 1%.
	threads := (d.Assignment.Milli + 9) / 10
	d.Adjust.AddEnv(EnvMPSThreads, strconv.FormatInt(threads, 10))
	if d.Assignment.MemoryMiB > 0 {
		// One GPU is visible in the container, so it is device 0 there.
		d.Adjust.AddEnv(EnvMPSMemLimit, "0="+strconv.FormatInt(d.Assignment.MemoryMiB, 10)+"M")
	}
	d.Adjust.AddEnv(EnvMPSPipeDir, cfg.MPSPipeDir)
	d.Adjust.AddMount(&api.Mount{
		Source:      cfg.MPSPipeDir,
		Destination: cfg.MPSPipeDir,
		Type:        "bind",
		Options:     []string{"rbind", "rw"},
	})
}
