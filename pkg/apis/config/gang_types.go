package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GPUGangArgs configures the GPUGang plugin.
type GPUGangArgs struct {
	metav1.TypeMeta

	// ScheduleTimeoutSeconds is how long a gang's reserved pods wait at
	// Permit for the rest of the gang when its PodGroup sets no
	// spec.scheduleTimeoutSeconds.
	ScheduleTimeoutSeconds int64
	// BackoffSeconds is how long a released gang's pods stay out of the
	// scheduling queue, unless GPUs are freed before.
	BackoffSeconds int64
	// TopologyKey is the node label naming the topology domain (a rack, a
	// block) a gang is kept in when one interconnect group cannot hold it;
	// "" prefers interconnect groups only.
	TopologyKey string
}

// DeepCopyObject implements runtime.Object.
func (a *GPUGangArgs) DeepCopyObject() runtime.Object {
	out := *a
	return &out
}
