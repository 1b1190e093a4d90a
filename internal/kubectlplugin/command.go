// Package kubectlplugin is kubectl gpusched: a read-only view of a cluster's
// GPUs from the user's kubeconfig. "explain POD" says why a GPU pod waits
// and what would let it run; "nodes" and "gpus" show every GPU's allocation
// and the fragmentation measure the policies use; "what-if" places pods on
// the live cluster, or on an export of it, under each policy.
//
// It reads with list calls only, never writes, and imports no
// k8s.io/kubernetes package, so the binary builds in seconds.
package kubectlplugin

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// options are the flags every subcommand shares.
type options struct {
	kubeconfig string
	context    string
	namespace  string
	output     string
	scheduler  []string
	poolLabel  string
	draDriver  string
}

// NewCommand builds the kubectl-gpusched command. It writes results to out.
func NewCommand(ctx context.Context, out io.Writer) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:           "kubectl-gpusched",
		Short:         "See a cluster's GPUs as gpusched does, and why a GPU pod waits",
		Long:          "kubectl gpusched reads the cluster with your kubeconfig (list calls only, it never writes) and answers with gpusched's placement engine.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	pf := root.PersistentFlags()
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	pf.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	pf.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the pod (default: the context's namespace)")
	pf.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	pf.StringSliceVar(&o.scheduler, "scheduler-name", nil, "count only pods for these schedulers as pending GPU pods (default: every pending GPU pod)")
	pf.StringVar(&o.poolLabel, "pool-label", "", "node label that names a node's pool (default: the first of the managed clouds' and Karpenter's node-pool labels)")
	pf.StringVar(&o.draDriver, "dra-driver", "", "DRA driver whose devices are GPUs: nodes that publish its ResourceSlices show those GPUs, held by ResourceClaims (default: NVIDIA's DRA driver)")
	root.AddCommand(explainCommand(ctx, o), nodesCommand(ctx, o), gpusCommand(ctx, o), whatIfCommand(ctx, o))
	return root
}

// clients connects with the user's kubeconfig and returns the namespace
// the context selects.
func (o *options) clients() (kubernetes.Interface, dynamic.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	rest, err := cfg.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("reading kubeconfig: %w", err)
	}
	rest.UserAgent = "kubectl-gpusched"
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cfg.Namespace(); err != nil {
			return nil, nil, "", fmt.Errorf("reading the context's namespace: %w", err)
		}
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, nil, "", err
	}
	dyn, err := dynamic.NewForConfig(rest)
	if err != nil {
		return nil, nil, "", err
	}
	return cs, dyn, ns, nil
}

func (o *options) validateOutput() error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output: %q is not a format: want text or json", o.output)
	}
	return nil
}
