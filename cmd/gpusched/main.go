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

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme" // GPUPlacementArgs and GPUGangArgs in the configuration scheme
	"github.com/gpusched/gpusched/pkg/plugins/gang"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/simulator"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(gpuplacement.Name, gpuplacement.New),
		app.WithPlugin(gang.Name, gang.New),
	)
	simulate := simulator.NewCommand()
	// The scheduler command's help shows its own flag sections; the
	// subcommand shows its own flags.
	simulate.SetHelpFunc(nil)
	simulate.SetUsageFunc(nil)
	command.AddCommand(simulate)
	os.Exit(cli.Run(command))
}
