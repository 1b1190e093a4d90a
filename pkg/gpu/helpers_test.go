package gpu_test

import "github.com/gpusched/gpusched/pkg/gpu"

// knownHost is a node whose CPU is known and whose memory is plentiful, so
// that host memory never decides.
func knownHost(freeMilliCPU int64) gpu.Host {
	return gpu.Host{Known: true, FreeMilliCPU: freeMilliCPU, FreeMemoryMiB: 1 << 30}
}
