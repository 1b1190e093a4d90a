package nri

import (
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusched/gpusched/pkg/gpu"
)

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
	// Read-only: a client still opens the daemon's named pipes and sockets
	// (a read-only mount does not stop writes to those), but cannot remove
	// or replace them to catch other pods' MPS traffic.
	d.Adjust.AddMount(&api.Mount{
		Source:      cfg.MPSPipeDir,
		Destination: cfg.MPSPipeDir,
		Type:        "bind",
		Options:     []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
	})
}
