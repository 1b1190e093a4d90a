// Command kubectl-gpusched is the kubectl plugin "kubectl gpusched": a
// read-only view of a cluster's GPUs, and why a GPU pod waits. Install it
// with go install onto PATH (or with krew, deploy/krew/gpusched.yaml); see
// docs/explain.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpusched/gpusched/internal/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := kubectlplugin.NewCommand(ctx, os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
