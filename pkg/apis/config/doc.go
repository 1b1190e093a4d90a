// Package config holds the internal (unversioned) types of gpusched's plugin
// arguments. They are registered into the kube-scheduler's configuration group,
// kubescheduler.config.k8s.io, so that they are set in the pluginConfig of an
// ordinary KubeSchedulerConfiguration; package v1 holds the versioned form
// users write, with its defaults.
package config
