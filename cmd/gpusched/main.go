// Command gpusched is a full kube-scheduler with gpusched's plugins
// registered: leader election, profiles, metrics and health endpoints are the
// upstream command's. Enable the plugins in a profile of the
// KubeSchedulerConfiguration passed with --config (see deploy/).
//
//	gpusched --config examples/gpusched-config.yaml --kubeconfig ~/.kube/config
//
// Unlike kube-scheduler, --kubeconfig (or else $KUBECONFIG) counts together
// with --config: it fills the file's clientConnection.kubeconfig when the
// file leaves it empty (see kubeconfig.go).
//
// `gpusched simulate` replays a cluster and a workload through the same
// plugins and configuration, in-process (see docs/simulator.md).
//
// `gpusched dashboard` serves a live, read-only view of the cluster's GPUs:
// a web page, JSON, Server-Sent Events and Prometheus metrics (see
// docs/dashboard.md).
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpusched/gpusched/pkg/dashboard"
	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/simulator"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// newCommand is the gpusched command: kube-scheduler's with gpusched's
// plugins, --kubeconfig applied beside --config, `simulate` and `dashboard`.
func newCommand() *cobra.Command {
	command := app.NewSchedulerCommand(plugins.CommandOptions()...)
	command.Use = "gpusched"
	withKubeconfig(command)
	command.AddCommand(simulator.NewCommand(), dashboard.NewCommand(), defrag.NewCommand())
	return command
}
