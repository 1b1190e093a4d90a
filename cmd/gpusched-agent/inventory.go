package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// inventoryFlags are the settings of `gpusched-agent inventory`.
type inventoryFlags struct {
	output    string
	clique    string
	sysfsRoot string
	nvmlMock  string
}

// newInventoryCommand is `gpusched-agent inventory`: one discovery, printed,
// with no API server, runtime or kubelet involved. It is what an operator
// runs on a node (or in the agent's image) before deploying, to see what the
// agent would publish there.
func newInventoryCommand() *cobra.Command {
	f := &inventoryFlags{}
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "discover the node's GPUs once and print what the agent would publish in " + gpu.AnnotationDevices,
		Long: "Discovers the node's GPUs through NVML once and prints the " + gpu.AnnotationDevices +
			" annotation the agent would publish, with what NVML reported for each GPU (NVML index, " +
			"/dev/nvidia minor, PCI bus, NUMA node, MIG mode, NVLink group) and whether the agent can " +
			"watch its XID events. Exits non-zero when NVML " +
			"cannot be asked or a GPU cannot be read. Needs no cluster.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return inventory(cmd.OutOrStdout(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.output, "output", "o", "table", "table or json")
	fs.StringVar(&f.clique, "clique", "", "the node's "+gpu.LabelClique+" label, which names NVLink groups on multi-node NVLink systems")
	fs.StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "where the host's /sys is mounted, for GPUs' NUMA nodes")
	fs.StringVar(&f.nvmlMock, "nvml-mock", "", "use one of go-nvml's mock machines instead of the driver (dgxa100 or dgxh100)")
	return cmd
}

// inventoryReport is the JSON form of `inventory -o json`.
type inventoryReport struct {
	// Annotation is the gpusched.io/gpu-devices value the agent publishes.
	Annotation string `json:"annotation"`
	// Devices are the engine's view of it, health marks aside.
	Devices []gpu.Device `json:"devices"`
	// GPUs are NVML's answers per physical GPU.
	GPUs []discovery.GPU `json:"gpus"`
	// Unwatched maps the UUID of each GPU whose XID events the agent cannot
	// watch (so a failing GPU is never marked unhealthy) to why.
	Unwatched map[string]string `json:"unwatched"`
	// Errors are the GPUs NVML listed but the agent could not read (left
	// out of the annotation).
	Errors []string `json:"errors,omitempty"`
}

func inventory(w io.Writer, f *inventoryFlags) error {
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("--output %q: want table or json", f.output)
	}
	lib, err := openNVML(f.nvmlMock)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	m, discoverErr := discovery.Discover(lib, discovery.Options{Clique: f.clique, SysfsRoot: f.sysfsRoot})
	if m == nil {
		return discoverErr
	}
	snap, err := discovery.NewSnapshot(m, nil)
	if err != nil {
		return fmt.Errorf("the discovered GPUs are not a valid inventory: %w", err)
	}
	report := inventoryReport{Annotation: snap.Annotation, Devices: snap.Devices, GPUs: m.GPUs}
	if report.Unwatched, err = discovery.XIDSupport(lib, m); err != nil {
		report.Errors = append(report.Errors, "XID events: "+err.Error())
		report.Unwatched = nil
	}
	if discoverErr != nil {
		report.Errors = append(report.Errors, strings.Split(discoverErr.Error(), "\n")...)
	}
	if f.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := printInventory(w, report); err != nil {
		return err
	}
	if discoverErr != nil {
		return fmt.Errorf("some GPUs could not be read and would not be published: %w", discoverErr)
	}
	return nil
}

// printInventory writes the report as the annotation and one row per
// published device.
func printInventory(w io.Writer, r inventoryReport) error {
	fmt.Fprintf(w, "%s: %s\n\n", gpu.AnnotationDevices, r.Annotation)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tUUID\tMODEL\tMEMORY MiB\tGROUP\tNVML INDEX\tDEVICE NODE\tPCI BUS\tNUMA\tXID WATCHED")
	dash := func(n int) string {
		if n < 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, g := range r.GPUs {
		node := "-"
		if g.Minor >= 0 {
			node = fmt.Sprintf("/dev/nvidia%d", g.Minor)
		}
		watched := "yes"
		if why, ok := r.Unwatched[g.UUID]; ok {
			watched = "no: " + why
		} else if r.Unwatched == nil {
			watched = "unknown"
		}
		if !g.MIGEnabled {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", g.StableIndex(), g.UUID, g.Model, g.MemoryMiB,
				orDash(g.Group), g.Index, node, g.PCIBusID, dash(g.NUMANode), watched)
			continue
		}
		fmt.Fprintf(tw, "(MIG)\t%s\t%s\t%d\t-\t%d\t%s\t%s\t%s\t%s\n", g.UUID, g.Model, g.MemoryMiB, g.Index, node, g.PCIBusID, dash(g.NUMANode), watched)
		for _, d := range r.Devices {
			for _, mig := range g.MIG {
				if d.UUID == mig.UUID {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t-\t\t\t\t\t\n", d.Index, mig.UUID, mig.Model, mig.MemoryMiB)
				}
			}
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
