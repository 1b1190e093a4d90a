package nvmlmock

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Catalog are go-nvml's mock GPU models, the ones a machine can be built of
// with every NVML answer the mock gives (MIG profiles included), by the name
// "<family>-<memory>GB" under which a user would ask for them. Where go-nvml
// has an SXM and a PCIe variant of one size, the SXM one (as in a DGX) is
// listed.
var Catalog = map[string]gpus.Config{
	"A100-40GB":  gpus.A100_SXM4_40GB,
	"A100-80GB":  gpus.A100_SXM4_80GB,
	"A30-24GB":   gpus.A30_PCIE_24GB,
	"H100-80GB":  gpus.H100_SXM5_80GB,
	"H200-141GB": gpus.H200_SXM5_141GB,
	"B200-180GB": gpus.B200_SXM5_180GB,
}

// Lookup returns the catalog's GPU of a model name such as "A100-80GB",
// matched without regard to case.
func Lookup(model string) (gpus.Config, bool) {
	for name, cfg := range Catalog {
		if strings.EqualFold(name, model) {
			return cfg, true
		}
	}
	return gpus.Config{}, false
}

// PlainGPU describes a GPU go-nvml has no mock of: NVML reports the given
// name and memory, MIG is not supported (the GPU has no MIG profiles, so
// EnableMIG fails), and every other answer is the mock's default.
func PlainGPU(name string, memoryMiB uint64) gpus.Config {
	return gpus.Config{
		Name:     name,
		Brand:    nvml.BRAND_NVIDIA,
		MemoryMB: memoryMiB,
	}
}

// Build makes a machine of n identical GPUs of cfg (a Catalog entry, a
// go-nvml gpus.Config, or a PlainGPU). island(i) names the NVLink island of
// GPU i, as for New.
func Build(n int, cfg gpus.Config, island func(i int) int) (*Machine, error) {
	if n < 1 {
		return nil, fmt.Errorf("a mock machine needs at least one GPU, not %d", n)
	}
	s, err := server.New(server.WithGPUs(gpus.Multiple(n, cfg)...))
	if err != nil {
		return nil, fmt.Errorf("mock machine of %d %s: %w", n, cfg.Name, err)
	}
	return New(s, island), nil
}

// MachineUUID is the UUID that SetMachineNumber(machine) gives the GPU built
// at index i: "GPU-<machine>-0000-4000-8000-<i>", both in hex, so the UUID
// says which simulated node and which GPU it is. Machine 0's are GPUUUID's.
func MachineUUID(machine, i int) string {
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", machine, i)
}

// SetMachineNumber gives the machine's GPUs the UUIDs MachineUUID(machine, i),
// so that several machines (one per simulated node) have distinct GPUs, as
// real ones do. Call it before the machine is first used; MIG devices created
// afterwards derive their UUIDs from the new ones.
func (m *Machine) SetMachineNumber(machine int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, d := range m.all {
		d.UUID = MachineUUID(machine, i)
	}
}
