// Package plugins lists gpusched's kube-scheduler plugins: the one registry
// that the gpusched command, the in-process control plane (playground,
// tests) and the simulator all register, so a configuration that loads in
// one loads in the others.
package plugins

import (
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme" // the plugins' args in the configuration scheme
	"github.com/gpusched/gpusched/pkg/plugins/gpudra"
	"github.com/gpusched/gpusched/pkg/plugins/gpugang"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gpupreemption"
	"github.com/gpusched/gpusched/pkg/plugins/gpuresourcesfit"
	"github.com/gpusched/gpusched/pkg/plugins/gputelemetry"
)

// Plugin is one of gpusched's plugins: its name in a profile and its factory.
type Plugin struct {
	Name string
	New  frameworkruntime.PluginFactory
}

// All lists gpusched's plugins.
func All() []Plugin {
	return []Plugin{
		{gpuplacement.Name, gpuplacement.New},
		{gputelemetry.Name, gputelemetry.New},
		{gpugang.Name, gpugang.New},
		{gpupreemption.Name, gpupreemption.New},
		{gpuresourcesfit.Name, gpuresourcesfit.New},
		{gpudra.Name, gpudra.New},
	}
}

// Registry is gpusched's plugins as an out-of-tree registry.
func Registry() frameworkruntime.Registry {
	r := frameworkruntime.Registry{}
	for _, p := range All() {
		r[p.Name] = p.New
	}
	return r
}

// CommandOptions registers gpusched's plugins in a kube-scheduler command
// (app.NewSchedulerCommand, app.Setup).
func CommandOptions() []app.Option {
	var out []app.Option
	for _, p := range All() {
		out = append(out, app.WithPlugin(p.Name, p.New))
	}
	return out
}
