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

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme" // GPUPlacementArgs, GPUTelemetryArgs and GPUGangArgs in the configuration scheme
	"github.com/gpusched/gpusched/pkg/plugins/gang"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gputelemetry"
	"github.com/gpusched/gpusched/pkg/simulator"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(gpuplacement.Name, gpuplacement.New),
		app.WithPlugin(gputelemetry.Name, gputelemetry.New),
		app.WithPlugin(gang.Name, gang.New),
	)
	command.Use = "gpusched"
	command.AddCommand(simulator.NewCommand())
	os.Exit(cli.Run(command))
}
