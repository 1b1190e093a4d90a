// Command gpusched-extender serves gpusched's GPU placement engine behind the
// stock kube-scheduler's HTTP extender API, for clusters that cannot replace
// their scheduler binary. It makes the decisions the GPUPlacement plugin
// makes; see docs/extender.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/extender"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(NewCommand(ctx))
	stop()
	os.Exit(code)
}

// NewCommand returns the gpusched-extender command; it serves until ctx ends.
func NewCommand(ctx context.Context) *cobra.Command {
	opts := extender.NewOptions()
	cmd := &cobra.Command{
		Use:   "gpusched-extender",
		Short: "gpusched's GPU placement behind the kube-scheduler's HTTP extender API",
		Long: `gpusched-extender answers the stock kube-scheduler's extender calls (filter,
prioritize, bind, preempt) with gpusched's GPU placement engine: the same
decisions as the GPUPlacement plugin, GPU by GPU, with fractional shares.
Configure the scheduler's extenders section as in deploy/extender/ and
docs/extender.md.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(ctx, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	cmd.AddCommand(newCertificatesCommand())
	return cmd
}

// newCertificatesCommand returns "gpusched-extender certificates", which
// writes the certificates of mutual TLS between the scheduler and the
// extender (docs/extender.md, "Certificates").
func newCertificatesCommand() *cobra.Command {
	req := extender.CertificateRequest{
		ServerNames: []string{"gpusched-extender.kube-system.svc"},
		ClientName:  extender.DefaultClient,
		ValidFor:    365 * 24 * time.Hour,
	}
	var dir string
	cmd := &cobra.Command{
		Use:   "certificates --dir DIR",
		Short: "Write a CA, the extender's serving certificate and the scheduler's client certificate",
		Long: `certificates creates a CA used for nothing else, issues from it the
extender's serving certificate (` + extender.ServerCert + `, ` + extender.ServerKey + `) and the
scheduler's client certificate (` + extender.ClientCert + `, ` + extender.ClientKey + `), and writes
them with the CA's certificate (` + extender.CAFile + `) into DIR. The CA's key is not
kept: rotate by writing a new set. See docs/extender.md ("Certificates").`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			if dir == "" {
				return errors.New("--dir is required")
			}
			return extender.WriteCertificates(dir, req)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "directory to write the files into (created 0700)")
	cmd.Flags().StringSliceVar(&req.ServerNames, "server-name", req.ServerNames, "DNS names and IP addresses the scheduler reaches the extender by")
	cmd.Flags().StringVar(&req.ClientName, "client-name", req.ClientName, "the client certificate's common name (the extender's --client-name)")
	cmd.Flags().DurationVar(&req.ValidFor, "valid-for", req.ValidFor, "validity of every certificate")
	return cmd
}

// run validates the flags, connects to the API server and serves until ctx ends.
func run(ctx context.Context, opts *extender.Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	config, err := clientConfig(opts)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	ctx = klog.NewContext(ctx, klog.Background())
	return extender.Run(ctx, opts, client)
}

// clientConfig is the kubeconfig's client configuration, or the in-cluster one.
func clientConfig(opts *extender.Options) (*rest.Config, error) {
	var config *rest.Config
	var err error
	if opts.Kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	} else {
		config, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API client configuration (--kubeconfig %q): %w", opts.Kubeconfig, err)
	}
	config = rest.AddUserAgent(config, "gpusched-extender")
	config.QPS, config.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	return config, nil
}
