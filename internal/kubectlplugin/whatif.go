package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/whatif"
)

// whatIfFlags are what-if's own flags.
type whatIfFlags struct {
	pods     []string
	nodes    []string
	from     string
	addLike  []string
	count    int
	policies []string
	seed     int64
}

func whatIfCommand(ctx context.Context, o *options) *cobra.Command {
	f := &whatIfFlags{}
	cmd := &cobra.Command{
		Use:   "what-if --pods FILE [--nodes FILE | --add-like NODE=N] [--from EXPORT]",
		Short: "Where pods would land on the live cluster, or an export, with extra nodes, under each policy",
		Long: "what-if places the pods of --pods one at a time, in file order, on the cluster as it is (its bound pods hold their GPUs, " +
			"CPU and memory) plus any extra nodes, as gpusched's simulator places them with its built-in profile, and prints " +
			"where each pod lands or why it does not, per policy. --from reads the cluster from a `kubectl get nodes,pods -A -o yaml` " +
			"export instead of the API server. See docs/explain.md for what it models and what it does not.",
		Example: "  # would these 12 pods fit if I add two nodes like gpu-h100-1?\n" +
			"  kubectl gpusched what-if --pods train.yaml --count 12 --add-like gpu-h100-1=2",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validateOutput(); err != nil {
				return err
			}
			in, err := f.input(ctx, o)
			if err != nil {
				return err
			}
			results, err := whatif.Run(in, whatif.Options{Policies: f.policies, Seed: f.seed})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), results)
			}
			return writeWhatIf(cmd.OutOrStdout(), results)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.pods, "pods", nil, "YAML or JSON file(s) of the Pods to place, in order (a List, or documents separated by ---); required")
	fl.StringSliceVar(&f.nodes, "nodes", nil, "YAML or JSON file(s) of Nodes to add to the cluster")
	fl.StringSliceVar(&f.addLike, "add-like", nil, "NODE=N: add N copies of an existing node (its labels, GPUs and allocatable, none of its pods)")
	fl.StringVar(&f.from, "from", "", "read the cluster (Nodes and Pods) from this export instead of the API server")
	fl.IntVar(&f.count, "count", 1, "submit each pod of --pods this many times (names get -0, -1, ...)")
	fl.StringSliceVar(&f.policies, "policies", nil, "policies to compare (default: every registered policy); \""+whatif.DefaultPolicy+"\" is the default policy")
	fl.Int64Var(&f.seed, "seed", whatif.DefaultSeed, "seed of the node order that breaks ties, as the simulator's --seeds")
	return cmd
}

// input reads the question: the cluster, the nodes to add and the pods.
func (f *whatIfFlags) input(ctx context.Context, o *options) (whatif.Input, error) {
	var in whatif.Input
	if len(f.pods) == 0 {
		return in, fmt.Errorf("--pods: no file given: want the Pods to place")
	}
	if f.count < 1 {
		return in, fmt.Errorf("--count: %d is not a count: want 1 or more", f.count)
	}
	if f.from != "" {
		nodes, pods, err := readObjectFile(f.from)
		if err != nil {
			return in, fmt.Errorf("--from: %w", err)
		}
		in.Nodes, in.Pods = nodes, pods
	} else {
		cs, dyn, _, err := o.clients()
		if err != nil {
			return in, err
		}
		c, err := readCluster(ctx, cs, dyn)
		if err != nil {
			return in, err
		}
		in.Nodes, in.Pods = c.nodes, c.pods
	}
	for _, file := range f.nodes {
		nodes, _, err := readObjectFile(file)
		if err != nil {
			return in, fmt.Errorf("--nodes: %w", err)
		}
		in.ExtraNodes = append(in.ExtraNodes, nodes...)
	}
	for _, spec := range f.addLike {
		nodes, err := copiesOf(in.Nodes, spec)
		if err != nil {
			return in, err
		}
		in.ExtraNodes = append(in.ExtraNodes, nodes...)
	}
	for _, file := range f.pods {
		_, pods, err := readObjectFile(file)
		if err != nil {
			return in, fmt.Errorf("--pods: %w", err)
		}
		if len(pods) == 0 {
			return in, fmt.Errorf("--pods: %s holds no Pod", file)
		}
		in.NewPods = append(in.NewPods, repeat(pods, f.count)...)
	}
	return in, nil
}

// copiesOf reads NODE=N and returns N copies of the node, named
// NODE-whatif-1..N, with nothing on them.
func copiesOf(nodes []*v1.Node, spec string) ([]*v1.Node, error) {
	name, count, ok := strings.Cut(spec, "=")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 {
		return nil, fmt.Errorf("--add-like: %q is not NODE=N: want a node's name and a count of 1 or more", spec)
	}
	for _, node := range nodes {
		if node.Name != name {
			continue
		}
		out := make([]*v1.Node, n)
		for i := range out {
			c := node.DeepCopy()
			c.Name = fmt.Sprintf("%s-whatif-%d", name, i+1)
			c.UID, c.ResourceVersion = "", ""
			c.Spec.Unschedulable = false
			if c.Labels != nil {
				if _, has := c.Labels[v1.LabelHostname]; has {
					c.Labels[v1.LabelHostname] = c.Name
				}
			}
			out[i] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("--add-like: %q: no node of that name in the cluster", name)
}

// repeat returns count copies of each pod, in order; with count > 1 the
// copies are named NAME-0, NAME-1, ...
func repeat(pods []*v1.Pod, count int) []*v1.Pod {
	if count == 1 {
		return pods
	}
	out := make([]*v1.Pod, 0, len(pods)*count)
	for _, p := range pods {
		for i := range count {
			c := p.DeepCopy()
			c.Name = fmt.Sprintf("%s-%d", p.Name, i)
			c.UID = ""
			out = append(out, c)
		}
	}
	return out
}

// writeWhatIf prints the policies side by side, then each pod's outcome
// under each policy.
func writeWhatIf(w io.Writer, results []whatif.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tPLACED\tNOT PLACED\tGPU ALLOCATED\tFRAGMENTED")
	for _, r := range results {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%% -> %.1f%%\t%.1f%% -> %.1f%%\n", r.Policy, s.Placed, s.Unplaced,
			s.AllocatedPctBefore, s.AllocatedPctAfter, s.FragmentedPctBefore, s.FragmentedPctAfter)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		fmt.Fprintf(w, "\n%s:\n", r.Policy)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  POD\tNODE\tGPUS\tNOTE")
		for _, p := range r.Placements {
			note := ""
			if len(p.NotModeled) > 0 {
				note = "not checked: " + strings.Join(p.NotModeled, ", ")
			}
			if !p.Placed() {
				fmt.Fprintf(tw, "  %s\t-\t-\t%s\n", p.Pod, strings.TrimSpace(p.Reason+" "+note))
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Pod, p.Node, dash(joinInts(p.GPUs)), note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
