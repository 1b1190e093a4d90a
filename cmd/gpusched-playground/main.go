// Command gpusched-playground runs gpusched on one machine with no cluster
// and no GPU: an in-process etcd and kube-apiserver on 127.0.0.1, simulated
// GPU nodes, and the gpusched scheduler.
//
//	go run ./cmd/gpusched-playground --demo      # place a sample workload, print the placements, exit
//	go run ./cmd/gpusched-playground             # serve; use kubectl with the printed KUBECONFIG
//
// See docs/playground.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/gpusched/gpusched/internal/playground"
)

func main() {
	flags := playground.NewFlags()
	fs := pflag.NewFlagSet("gpusched-playground", pflag.ContinueOnError)
	flags.AddFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: gpusched-playground [--demo] [flags]\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0) // pflag has printed the usage
		}
		fmt.Fprintf(os.Stderr, "gpusched-playground: %v\n", err)
		fs.Usage()
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gpusched-playground: unexpected arguments %q: it takes flags only\n", fs.Args())
		os.Exit(2)
	}
	opts, err := flags.Options()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpusched-playground: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills the process at once.
		<-ctx.Done()
		stop()
	}()
	if err := playground.Run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "gpusched-playground: %v\n", err)
		os.Exit(1)
	}
}
