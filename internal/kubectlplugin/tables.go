package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

func nodesCommand(ctx context.Context, o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "Every GPU node: allocation, free GPU compute, and its fragmentation",
		Long: "nodes lists every GPU node with its GPUs' allocation and the fragmentation measure the policies minimise: " +
			"the free GPU compute that the cluster's typical pods could not use.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.read(ctx)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), nodesJSON{Cluster: clusterOf(s), Nodes: s.Nodes})
			}
			return writeNodes(cmd.OutOrStdout(), s)
		},
	}
}

func gpusCommand(ctx context.Context, o *options) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "Every GPU: who holds it, its milli-GPU and memory allocated, and what is free",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.read(ctx)
			if err != nil {
				return err
			}
			nodes := s.Nodes
			if node != "" {
				n, ok := s.Node(node)
				if !ok {
					return fmt.Errorf("--node: %q is not a GPU node of this cluster", node)
				}
				nodes = []gpuview.Node{*n}
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), nodesJSON{Cluster: clusterOf(s), Nodes: nodes})
			}
			return writeGPUs(cmd.OutOrStdout(), nodes)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node's GPUs")
	return cmd
}

func (o *options) read(ctx context.Context) (*gpuview.Snapshot, error) {
	if err := o.validateOutput(); err != nil {
		return nil, err
	}
	cs, dyn, _, err := o.clients()
	if err != nil {
		return nil, err
	}
	c, err := readCluster(ctx, cs, dyn)
	if err != nil {
		return nil, err
	}
	return o.snapshot(c), nil
}

// nodesJSON is the -o json form of nodes and gpus.
type nodesJSON struct {
	Cluster clusterJSON    `json:"cluster"`
	Nodes   []gpuview.Node `json:"nodes"`
}

// clusterJSON is the cluster's totals with the percentages spelled out.
type clusterJSON struct {
	gpuview.Totals
	FreeMilli     int64   `json:"freeMilli"`
	AllocatedPct  float64 `json:"allocatedPct"`
	FragmentedPct float64 `json:"fragmentedPct"`
	PendingPods   int     `json:"pendingGPUPods"`
}

func clusterOf(s *gpuview.Snapshot) clusterJSON {
	t := s.Cluster
	return clusterJSON{Totals: t, FreeMilli: t.FreeMilli(), AllocatedPct: round2(t.AllocatedPct()),
		FragmentedPct: round2(t.FragmentedPct()), PendingPods: len(s.Pending)}
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

func writeNodes(w io.Writer, s *gpuview.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOOL\tMODEL\tGPUS\tALLOCATED\tFREE\tFRAGMENTED\tFREE CPU\tFREE MEMORY")
	for i := range s.Nodes {
		n := &s.Nodes[i]
		model := n.Model
		if n.InventoryError != "" {
			model = "invalid: " + n.InventoryError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dm (%.0f%%)\t%dm\t%.0fm\t%dm\t%s\n", n.Name, dash(n.Pool), model, n.GPUCount,
			n.AllocatedMilli, n.AllocatedPct(), n.FreeMilli(), n.FragmentedMilli, max(0, n.FreeMilliCPU), gpuview.Memory(max(0, n.FreeMemoryMiB)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeConflicts(w, s.Nodes); err != nil {
		return err
	}
	c := &s.Cluster
	_, err := fmt.Fprintf(w, "\nCluster: %d nodes, %d GPUs; allocated %.1f%%; fragmented %.1f%% of GPU capacity (%.0fm of %dm free); %d pending GPU pods\n",
		len(s.Nodes), c.GPUCount, c.AllocatedPct(), c.FragmentedPct(), c.FragmentedMilli, c.FreeMilli(), len(s.Pending))
	return err
}

func writeGPUs(w io.Writer, nodes []gpuview.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tMEMORY\tALLOCATED\tRESERVED MEMORY\tFREE\tHOLDERS")
	for i := range nodes {
		n := &nodes[i]
		if n.InventoryError != "" {
			fmt.Fprintf(tw, "%s\t-\tinvalid inventory: %s\t\t\t\t\t\n", n.Name, n.InventoryError)
			continue
		}
		if n.ReservationsError != "" {
			fmt.Fprintf(tw, "%s\t-\tinvalid reservations, none held: %s\t\t\t\t\t\n", n.Name, n.ReservationsError)
		}
		for _, g := range n.GPUs {
			model := g.Model
			if g.Unhealthy != "" {
				model += " (unhealthy: " + g.Unhealthy + ")"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%dm\t%s\t%dm, %s\t%s\n", n.Name, g.Index, model, gpuview.Memory(g.MemoryMiB),
				g.AllocatedMilli, gpuview.Memory(g.AllocatedMemoryMiB), g.FreeMilli(), gpuview.Memory(g.FreeMemoryMiB()), holders(g.Holders, g.Reserved))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeConflicts(w, nodes)
}

// writeConflicts lists the nodes' assignment conflicts, if any: GPUs that
// moved or left under the pods assigned them.
func writeConflicts(w io.Writer, nodes []gpuview.Node) error {
	for i := range nodes {
		for _, c := range nodes[i].Conflicts {
			if _, err := fmt.Fprintf(w, "conflict on %s: %s\n", nodes[i].Name, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// holders lists a GPU's pods and the defragmenter's reservations on it.
func holders(hs []gpuview.Holder, reserved []gpuview.Reserved) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s/%s %dm", h.Namespace, h.Name, h.Milli))
	}
	for _, r := range reserved {
		parts = append(parts, fmt.Sprintf("reserved %dm for %s (%s)", r.Milli, r.For, r.ID))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
