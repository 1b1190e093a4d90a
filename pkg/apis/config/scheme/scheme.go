// Package scheme registers gpusched's plugin arguments into the
// kube-scheduler's configuration scheme. Importing it is enough: a
// KubeSchedulerConfiguration read by the kube-scheduler command then decodes,
// defaults and converts GPUPlacementArgs, GPUTelemetryArgs and GPUGangArgs
// like any in-tree
// plugin's args.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulerv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	v1 "github.com/gpusched/gpusched/pkg/apis/config/v1"
)

func init() {
	// The configuration scheme decodes the args; the plugin-args conversion
	// scheme defaults them and converts them to the internal version.
	for _, s := range []*runtime.Scheme{kubeschedulerscheme.Scheme, kubeschedulerv1.GetPluginArgConversionScheme()} {
		utilruntime.Must(config.AddToScheme(s))
		utilruntime.Must(v1.AddToScheme(s))
	}
}
