package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

func explainCommand(ctx context.Context, o *options) *cobra.Command {
	var detail int
	var policy string
	cmd := &cobra.Command{
		Use:   "explain POD",
		Short: "Why a GPU pod waits, per node and GPU, and the nearest ways it would run",
		Long: "explain answers with gpusched's engine on the cluster as it is now: per node and per GPU why the pod does not fit " +
			"(the engine's reasons), the nearest ways it would (which GPUs to free and the pods that hold them, lowest priority first), " +
			"what its gang lacks as a whole, and its place in the scheduler's queue.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validateOutput(); err != nil {
				return err
			}
			cs, dyn, ns, err := o.clients()
			if err != nil {
				return err
			}
			pod, err := cs.CoreV1().Pods(ns).Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading pod %s/%s: %w", ns, args[0], err)
			}
			c, err := readCluster(ctx, cs, dyn)
			if err != nil {
				return err
			}
			snap := o.snapshot(c)
			e := snap.Explain(pod, c.pods, c.gangs)
			if pod.Spec.NodeName == "" {
				pdbs, pdbErr := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
				rules := defrag.Rules{}
				switch {
				case pdbErr == nil:
					for i := range pdbs.Items {
						rules.PDBs = append(rules.PDBs, &pdbs.Items[i])
					}
				case !apierrors.IsForbidden(pdbErr):
					return fmt.Errorf("listing PodDisruptionBudgets: %w", pdbErr)
				}
				if e.Migration, err = defrag.Explain(snap, pod, c.gangs, rules, gpu.PolicyType(policy), time.Now()); err != nil {
					return fmt.Errorf("--policy: %w", err)
				}
				if pdbErr != nil && e.Migration != "" {
					e.Migration += " (PodDisruptionBudgets not read: forbidden)"
				}
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), e)
			}
			return writeExplanation(cmd.OutOrStdout(), &e, detail)
		},
	}
	cmd.Flags().IntVar(&detail, "nodes", 10, "show the per-GPU answer of this many nodes (nearest first); -1 for all")
	cmd.Flags().StringVar(&policy, "policy", string(gpu.DefaultPolicy), "the scheduler's placement policy, with which the defragmenter's plan places pods")
	return cmd
}

// writeExplanation prints an explanation for a person: the verdict first,
// then the nearest fixes, the gang, and the nodes' answers.
func writeExplanation(w io.Writer, e *gpuview.Explanation, detail int) error {
	fmt.Fprintf(w, "Pod %s/%s", e.Namespace, e.Name)
	if e.Demand != "" {
		fmt.Fprintf(w, " asks for %s", e.Demand)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Verdict: %s\n", e.Verdict)
	if e.QueuePosition > 0 {
		fmt.Fprintf(w, "Queue: %d of %d pending GPU pods (priority, then age)\n", e.QueuePosition, e.QueueLength)
	}
	if e.SchedulerSays != "" {
		fmt.Fprintf(w, "Scheduler's last attempt: %s\n", e.SchedulerSays)
	}
	if len(e.Fixes) > 0 {
		fmt.Fprintln(w, "\nNearest ways it would run:")
		for i, f := range e.Fixes {
			fmt.Fprintf(w, "  %d. %s\n", i+1, f.Text)
		}
	}
	if e.Migration != "" {
		fmt.Fprintf(w, "\nMigration: %s\n", e.Migration)
	}
	if g := e.Gang; g != nil {
		fmt.Fprintf(w, "\nGang %s (minMember %d): %d bound, %d pending, %d of them fit now together\n", g.Name, g.MinMember, g.Bound, g.Pending, g.FitNow)
		if g.Short != "" {
			fmt.Fprintf(w, "  %s\n", g.Short)
		}
		if len(g.Models) > 0 {
			fmt.Fprintf(w, "  held to one GPU model: %s\n", strings.Join(g.Models, " or "))
		}
		if g.ModelNote != "" {
			fmt.Fprintf(w, "  %s\n", g.ModelNote)
		}
		if g.Clique != "" {
			fmt.Fprintf(w, "  %s\n", g.Clique)
		}
	}
	if len(e.Nodes) == 0 {
		return nil
	}
	shown := e.Nodes
	if detail >= 0 && len(shown) > detail {
		shown = shown[:detail]
	}
	fmt.Fprintf(w, "\nNodes (%d of %d, nearest first):\n", len(shown), len(e.Nodes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tGPU\tMODEL\tFREE\tWHY NOT")
	for _, a := range shown {
		why := strings.Join(a.Reasons, "; ")
		if a.Fits {
			why = "fits"
		}
		fmt.Fprintf(tw, "  %s\t\t\t\t%s\n", a.Node, why)
		if a.Unresolvable && sameReason(a.GPUs) {
			g := a.GPUs[0]
			fmt.Fprintf(tw, "  \tall %d\t%s\t\t%s\n", len(a.GPUs), g.Model, g.Reason)
			continue
		}
		for _, g := range a.GPUs {
			reason := g.Reason
			if reason == "" {
				reason = "could take it"
			}
			fmt.Fprintf(tw, "  \t%d\t%s\t%dm, %s\t%s\n", g.Index, g.Model, g.FreeMilli, gpuview.Memory(g.FreeMemoryMiB), reason)
		}
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// sameReason reports whether every GPU has the same model and reason, so
// that one line can stand for them.
func sameReason(gpus []gpuview.GPUAnswer) bool {
	if len(gpus) == 0 {
		return false
	}
	for _, g := range gpus[1:] {
		if g.Reason != gpus[0].Reason || g.Model != gpus[0].Model {
			return false
		}
	}
	return true
}
