package nri

import (
	"fmt"
	"path/filepath"
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

// Rejection reasons, stable strings (the metrics' "reason" label).
const (
	ReasonMissing      = "missing_assignment"
	ReasonMalformed    = "malformed_assignment"
	ReasonForeignNode  = "foreign_node"
	ReasonUnknownGPU   = "unknown_gpu"
	ReasonNoInventory  = "no_inventory"
	ReasonDuplicateEnv = "duplicate_env"
	ReasonGPUInUse     = "gpu_in_use"
	ReasonUnrestricted = "malformed_unrestricted"
	// ReasonForeignDevices: the container carries another GPU in a way the
	// agent cannot take back.
	ReasonForeignDevices = "foreign_devices"
)

// Reasons lists every rejection reason, for metrics and tests.
var Reasons = []string{ReasonMissing, ReasonMalformed, ReasonForeignNode, ReasonUnknownGPU, ReasonNoInventory,
	ReasonDuplicateEnv, ReasonGPUInUse, ReasonUnrestricted, ReasonForeignDevices}

// Config is the plugin's configuration.
type Config struct {
	// NodeName is this node; an assignment must name it.
	NodeName string
	// Mode is ModeCDI or ModeEnv.
	Mode Mode
	// MPSPipeDir, when set, is the host directory of the MPS control
	// daemon's pipes: shares then get MPS limits and the directory mounted.
	MPSPipeDir string
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
// what is wrong and what would be right; the runtime reports it as the
// reason the container could not be created (kubectl describe pod shows it).
type RejectError struct {
	// Pod is "namespace/name".
	Pod string
	// Reason is one of the Reason* constants.
	Reason string
	// Subject is the annotation or variable at fault.
	Subject string
	// Detail says what is wrong and what would be right.
	Detail string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("gpusched: pod %s: %s: %s", e.Pod, e.Subject, e.Detail)
}

// Decision is what one container is given.
type Decision struct {
	// GPUPod is whether the pod has GPU demand; Why says how it was told.
	GPUPod bool
	Why    string
	// Exempt: the pod is unrestricted (see AnnotationUnrestricted); nothing
	// is changed.
	Exempt bool
	// UUIDs are the GPUs the container gets (none for a pod without GPUs).
	UUIDs []string
	// Assignment is the pod's parsed assignment (GPU pods only).
	Assignment gpu.Assignment
	// Adjust is the NRI adjustment (nil when Exempt).
	Adjust *api.ContainerAdjustment
}

// Decide works out what a container of pod is given, from the pod sandbox's
// annotations, the container as the runtime built it (environment, CDI
// devices, device nodes, mounts, annotations) and the node's current GPUs.
// It makes no API call. It never panics; a container that cannot be given
// exactly its pod's GPUs gets a *RejectError.
//
// In order:
//  1. a pod with gpusched.io/gpu-unrestricted: "true" is left as it is;
//  2. a container whose environment holds NVIDIA_VISIBLE_DEVICES or a
//     CUDA_MPS_* variable twice is refused (the runtime would apply the
//     agent's value to one entry and leave the other);
//  3. a pod without GPU demand (see demand) gets NVIDIA_VISIBLE_DEVICES=void;
//  4. a pod with GPU demand gets the GPUs of its assignment, which must
//     name this node and GPUs of its inventory;
//  5. a GPU container that carries NVIDIA's device-list mount of another
//     GPU is refused: the runtime would give it that GPU too;
//  6. every GPU beyond those of step 3 or 4 is denied in the container's
//     device cgroup, and NVIDIA CDI annotations are removed (see confine).
//
// Every container of a GPU pod gets the pod's GPUs: gpusched assigns GPUs
// to pods, not to containers.
func Decide(cfg *Config, snap *discovery.Snapshot, pod *api.PodSandbox, ctr *api.Container) (Decision, error) {
	podName := pod.GetNamespace() + "/" + pod.GetName()
	annotations := pod.GetAnnotations()
	exempt, err := unrestricted(annotations)
	if err != nil {
		return Decision{}, &RejectError{Pod: podName, Reason: ReasonUnrestricted, Subject: AnnotationUnrestricted, Detail: err.Error()}
	}
	if exempt {
		return Decision{Exempt: true}, nil
	}
	if key, n := duplicatedEnv(ctr.GetEnv()); n > 1 {
		return Decision{}, &RejectError{Pod: podName, Reason: ReasonDuplicateEnv, Subject: key, Detail: fmt.Sprintf(
			"the container's environment sets %s %d times (the image's config and the pod spec both set it?); "+
				"the runtime would give the agent's value to one and keep the others: remove it from the pod spec's env", key, n)}
	}
	d := Decision{Adjust: &api.ContainerAdjustment{}}
	d.GPUPod, d.Why = demand(annotations, ctr)
	if !d.GPUPod {
		d.Adjust.AddEnv(EnvVisibleDevices, "void")
		confine(d.Adjust, snap, ctr, nil)
		return d, nil
	}
	reject := func(reason, format string, args ...any) (Decision, error) {
		return Decision{GPUPod: true, Why: d.Why}, &RejectError{Pod: podName, Reason: reason, Subject: gpu.AnnotationAssigned, Detail: fmt.Sprintf(format, args...)}
	}
	raw, assigned := annotations[gpu.AnnotationAssigned]
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
	var minors []int
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
		minors = append(minors, snap.Minor(dev.UUID))
	}
	if m := foreignDeviceList(ctr, d.UUIDs, a.Devices); m != "" {
		return Decision{GPUPod: true, Why: d.Why}, &RejectError{Pod: podName, Reason: ReasonForeignDevices, Subject: m, Detail: fmt.Sprintf(
			"the container carries a device-list mount of a GPU that is not among its assigned %s: NVIDIA's device plugin "+
				"allocates GPUs on this node with DEVICE_LIST_STRATEGY=volume-mounts; disable it on gpusched's nodes, or use its envvar strategy",
			strings.Join(d.UUIDs, ","))}
	}
	give(cfg, &d)
	confine(d.Adjust, snap, ctr, minors)
	return d, nil
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

// unrestricted reads AnnotationUnrestricted: "true" exempts the pod, "false"
// or no annotation does not, anything else is an error.
func unrestricted(annotations map[string]string) (bool, error) {
	v, ok := annotations[AnnotationUnrestricted]
	switch {
	case !ok || v == "false":
		return false, nil
	case v == "true":
		return true, nil
	}
	return false, fmt.Errorf("%q is not allowed: want \"true\" (the pod's containers are left as the runtime makes them) or \"false\"", v)
}

// duplicatedEnv returns the first of the variables that decide a
// container's GPUs (NVIDIA_VISIBLE_DEVICES, CUDA_MPS_*) that env holds more
// than once, and how often; n <= 1 when there is none.
func duplicatedEnv(env []string) (key string, n int) {
	var seen map[string]int
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != EnvVisibleDevices && !strings.HasPrefix(k, envMPSPrefix) {
			continue
		}
		if seen == nil {
			seen = map[string]int{}
		}
		seen[k]++
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if seen[k] > 1 {
			return k, seen[k]
		}
	}
	return "", 0
}
