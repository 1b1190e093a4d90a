package nri

// Names the agent reads or writes on pods and containers.
const (
	// AnnotationUnrestricted: "true" on a pod leaves its containers as the
	// runtime makes them (NVIDIA's own pods: DCGM exporter, GPU Feature
	// Discovery, validators; the agent itself). The admission policy
	// gpusched-unrestricted (deploy/admission/unrestricted.yaml) admits it only
	// on pods whose ServiceAccount RBAC allows the verb "unrestricted" on
	// gpus.gpusched.io, which a tenant cannot grant itself.
	AnnotationUnrestricted = "gpusched.io/gpu-unrestricted"
	// AnnotationTolerateMissingAgent is the annotation to name in the
	// runtime's NRI validator (tolerate_missing_plugins_annotation): "true"
	// lets a pod's containers be created while no agent is connected. Only
	// the agent's own pods need it; the same policy guards it.
	AnnotationTolerateMissingAgent = "gpusched.io/tolerate-missing-agent"

	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvDevicePluginGPUs is set by the agent's own device plugin (Allocate)
	// on every container the kubelet gave nvidia.com/gpu; its presence tells
	// the NRI step that the container asked for whole GPUs.
	EnvDevicePluginGPUs = "GPUSCHED_DEVICE_PLUGIN_GPUS"
	// EnvDevicePluginMilli is set by the agent's shares device plugin on
	// every container the kubelet gave gpusched.io/gpu-milli: the container
	// asked for a share as a resource.
	EnvDevicePluginMilli = "GPUSCHED_DEVICE_PLUGIN_MILLI"
	EnvMPSThreads        = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSMemLimit       = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSPipeDir        = "CUDA_MPS_PIPE_DIRECTORY"
	envMPSPrefix         = "CUDA_MPS_"

	// cdiKind is the CDI kind the agent gives GPUs as.
	cdiKind = "nvidia.com/gpu"
	// cdiVendor is NVIDIA's CDI vendor: every kind under it
	// (nvidia.com/gpu, k8s.device-plugin.nvidia.com/gpu,
	// management.nvidia.com/gpu, ...) reaches GPUs.
	cdiVendor = "nvidia.com"
	// cdiAnnotationPrefix: OCI annotations that ask a CDI-aware runtime or
	// the NVIDIA runtime for CDI devices (cdi.k8s.io/<name>, the device
	// plugin API's CDI annotations, and nvidia.cdi.k8s.io/<name>).
	cdiAnnotationPrefix = "cdi.k8s.io/"
	// deviceListDir is where NVIDIA's device plugin mounts its device list
	// under DEVICE_LIST_STRATEGY=volume-mounts; the NVIDIA runtime reads the
	// GPUs from the mount names.
	deviceListDir = "/var/run/nvidia-container-devices"
	// gpuMajor is the character device major of /dev/nvidia<minor>; minors
	// from gpuControlMinors up are nvidia-modeset (254) and nvidiactl (255).
	gpuMajor         = 195
	gpuControlMinors = 254
)
