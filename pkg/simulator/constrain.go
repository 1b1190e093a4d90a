package simulator

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/trace"
)

func newConstrainCommand() *cobra.Command {
	var opts trace.ConstrainOptions
	var like string
	cmd := &cobra.Command{
		Use:   "constrain",
		Short: "Write a variant of a pod list with a share of its GPU pods limited to GPU models",
		Long: `constrain writes a pod list (CSV) to stdout with --fraction of its GPU pods
limited to GPU models (gpu_spec), as the trace's gpuspec lists are made: the
pods are chosen at random, and each gets the models of a model-limited pod of
its shape (a share, one GPU, several GPUs) drawn from the --like lists, among
those some node of --nodes can host it on. The same inputs and --seed write
the same list. See docs/simulator.md.`,
		Example: `  T=../shared/traces/alibaba-gpu-2023
  gpusched simulate constrain --pods $T/openb_pod_list_default.csv --nodes $T/openb_node_list_gpu_node.csv \
      --like $T/openb_pod_list_gpuspec05.csv,$T/openb_pod_list_gpuspec10.csv,$T/openb_pod_list_gpuspec20.csv \
      --fraction 0.33 --seed 1 > gpuspec33-seed1.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Like = strings.Split(like, ",")
			return trace.Constrain(opts, cmd.OutOrStdout())
		},
		SilenceUsage: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Pods, "pods", "", "the pod list to constrain (Alibaba pod CSV)")
	fs.StringVar(&like, "like", "", "comma-separated pod lists whose model-limited pods give the models to draw")
	fs.StringVar(&opts.Nodes, "nodes", "", "the cluster (node CSV or YAML): pods get only models a node can host them on")
	fs.Float64Var(&opts.Fraction, "fraction", 0, "share of the GPU pods limited to models in the variant, 0..1")
	fs.Uint64Var(&opts.Seed, "seed", 1, "seed of the random choice of pods and models")
	for _, f := range []string{"pods", "like", "nodes", "fraction"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}
