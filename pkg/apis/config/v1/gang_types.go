package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// GPUGangArgs configures the GPUGang plugin.
type GPUGangArgs struct {
	metav1.TypeMeta `json:",inline"`

	// ScheduleTimeoutSeconds is how long a gang's reserved pods wait for the
	// rest of the gang when its PodGroup sets no spec.scheduleTimeoutSeconds:
	// 1..900 (the framework waits at most 15 minutes at Permit). Default: 60.
	ScheduleTimeoutSeconds *int64 `json:"scheduleTimeoutSeconds,omitempty"`
	// BackoffSeconds is how long the pods of a released gang (timed out, or
	// a pod that found no node) stay out of the scheduling queue, unless GPUs
	// are freed before: 1..600. Default: 10.
	BackoffSeconds *int64 `json:"backoffSeconds,omitempty"`
	// TopologyKey is the node label naming the topology domain (a rack, a
	// block) a gang is kept in when one interconnect group cannot hold it,
	// e.g. "topology.kubernetes.io/rack". Default: "" (interconnect groups only).
	TopologyKey string `json:"topologyKey,omitempty"`
}

// Defaults of GPUGangArgs.
const (
	DefaultScheduleTimeoutSeconds int64 = 60
	DefaultGangBackoffSeconds     int64 = 10
)

// SetDefaults_GPUGangArgs fills in what the user left out.
func SetDefaults_GPUGangArgs(a *GPUGangArgs) {
	if a.ScheduleTimeoutSeconds == nil {
		t := DefaultScheduleTimeoutSeconds
		a.ScheduleTimeoutSeconds = &t
	}
	if a.BackoffSeconds == nil {
		b := DefaultGangBackoffSeconds
		a.BackoffSeconds = &b
	}
}

// Convert_v1_GPUGangArgs_To_config_GPUGangArgs converts user-facing args to
// internal ones; defaults are applied before.
func Convert_v1_GPUGangArgs_To_config_GPUGangArgs(in *GPUGangArgs, out *config.GPUGangArgs) {
	*out = config.GPUGangArgs{TopologyKey: in.TopologyKey}
	if in.ScheduleTimeoutSeconds != nil {
		out.ScheduleTimeoutSeconds = *in.ScheduleTimeoutSeconds
	}
	if in.BackoffSeconds != nil {
		out.BackoffSeconds = *in.BackoffSeconds
	}
}

// Convert_config_GPUGangArgs_To_v1_GPUGangArgs converts internal args to
// their user-facing form.
func Convert_config_GPUGangArgs_To_v1_GPUGangArgs(in *config.GPUGangArgs, out *GPUGangArgs) {
	t, b := in.ScheduleTimeoutSeconds, in.BackoffSeconds
	*out = GPUGangArgs{ScheduleTimeoutSeconds: &t, BackoffSeconds: &b, TopologyKey: in.TopologyKey}
}

// DeepCopyObject implements runtime.Object.
func (a *GPUGangArgs) DeepCopyObject() runtime.Object {
	out := *a
	if a.ScheduleTimeoutSeconds != nil {
		t := *a.ScheduleTimeoutSeconds
		out.ScheduleTimeoutSeconds = &t
	}
	if a.BackoffSeconds != nil {
		b := *a.BackoffSeconds
		out.BackoffSeconds = &b
	}
	return &out
}
