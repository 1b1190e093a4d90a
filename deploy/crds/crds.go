// Package crds holds the CustomResourceDefinitions gpusched works with, the
// YAML files of this directory, for programs that install them (the
// playground).
package crds

import _ "embed"

// PodGroup is the PodGroup CRD of kubernetes-sigs/scheduler-plugins
// (scheduling.x-k8s.io_podgroups.yaml).
//
//go:embed scheduling.x-k8s.io_podgroups.yaml
var PodGroup []byte
