// Command gpusched is a full kube-scheduler with gpusched's plugins
// registered: leader election, profiles, metrics and health endpoints are the
// upstream command's. Enable the plugins in a profile of the
// KubeSchedulerConfiguration passed with --config (see deploy/).
//
// `gpusched simulate` replays a cluster and a workload through the same
// plugins and configuration, in-process (see docs/simulator.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/simulator"
)

func main() {
	command := app.NewSchedulerCommand(plugins.CommandOptions()...)
	command.Use = "gpusched"
	command.AddCommand(simulator.NewCommand())
	os.Exit(cli.Run(command))
}
