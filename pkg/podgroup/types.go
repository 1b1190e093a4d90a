// Package podgroup is the PodGroup API of kubernetes-sigs/scheduler-plugins
// (scheduling.x-k8s.io/v1alpha1), the way training operators (Kubeflow's
// training operator, MPI operator, Volcano-compatible tooling) declare a gang:
// a PodGroup object with spec.minMember, and pods that name it in the label
// scheduling.x-k8s.io/pod-group.
//
// The types here are gpusched's own, wire-compatible with the upstream CRD
// (deploy/crds/scheduling.x-k8s.io_podgroups.yaml), and converted from the
// unstructured objects a dynamic client returns, so that gpusched depends on
// no other scheduler's module.
package podgroup

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Group and Version of the PodGroup API.
const (
	Group   = "scheduling.x-k8s.io"
	Version = "v1alpha1"
	Kind    = "PodGroup"
)

// LabelPodGroup on a pod names the PodGroup, in the pod's namespace, that the
// pod is a member of.
const LabelPodGroup = "scheduling.x-k8s.io/pod-group"

// AnnotationGPUModels on a PodGroup says whether the gang's pods must run
// on one GPU model: "one" (the default, also when the annotation is absent)
// or "mixed", which lets them run on GPUs of different models. Pods restrict
// the models they accept with gpusched.io/gpu-models either way.
const AnnotationGPUModels = "gpusched.io/gang-gpu-models"

// The values of AnnotationGPUModels.
const (
	GPUModelsOne   = "one"
	GPUModelsMixed = "mixed"
)

// Resource is the PodGroup resource served by the CRD.
var Resource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "podgroups"}

// Phase is where a gang is in its life.
type Phase string

// The phases of a PodGroup, in the order a gang goes through them.
const (
	// PhasePending: fewer than minMember pods of the gang exist.
	PhasePending Phase = "Pending"
	// PhasePreScheduling: minMember pods exist; none is reserved or bound.
	PhasePreScheduling Phase = "PreScheduling"
	// PhaseScheduling: some pods are reserved (waiting for the rest of the
	// gang) or bound, fewer than minMember.
	PhaseScheduling Phase = "Scheduling"
	// PhaseScheduled: at least minMember pods are bound.
	PhaseScheduled Phase = "Scheduled"
	// PhaseRunning: at least minMember pods run.
	PhaseRunning Phase = "Running"
	// PhaseFinished: at least minMember pods succeeded.
	PhaseFinished Phase = "Finished"
	// PhaseFailed: a pod of the gang failed.
	PhaseFailed Phase = "Failed"
)

// PodGroup is a gang: pods that are placed all together or not at all.
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec,omitempty"`
	Status Status `json:"status,omitempty"`
}

// Spec is what the gang needs.
type Spec struct {
	// MinMember is how many pods must be placed together before any of them
	// is bound. It must be at least 1.
	MinMember int32 `json:"minMember,omitempty"`
	// MinResources is the least the gang needs to run. gpusched reads the
	// gang's GPUs from its pods, not from here.
	MinResources v1.ResourceList `json:"minResources,omitempty"`
	// ScheduleTimeoutSeconds is how long reserved pods wait for the rest of
	// the gang before every reservation is released. Unset: the scheduler's
	// default (GPUGangArgs.scheduleTimeoutSeconds).
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// Status is what the scheduler observed of the gang.
type Status struct {
	Phase Phase `json:"phase,omitempty"`
	// OccupiedBy names the owner of the gang's pods (their controller), when known.
	OccupiedBy string `json:"occupiedBy,omitempty"`
	// Scheduled counts the gang's pods bound to a node; Running, Succeeded and
	// Failed its pods in those pod phases.
	Scheduled int32 `json:"scheduled,omitempty"`
	Running   int32 `json:"running,omitempty"`
	Succeeded int32 `json:"succeeded,omitempty"`
	Failed    int32 `json:"failed,omitempty"`
	// ScheduleStartTime is when the scheduler first placed a pod of the gang.
	ScheduleStartTime *metav1.Time `json:"scheduleStartTime,omitempty"`
}

// FromUnstructured converts a PodGroup read through a dynamic client. It
// fails on a field of the wrong type (minMember: "four"), naming it.
func FromUnstructured(u *unstructured.Unstructured) (*PodGroup, error) {
	pg := &PodGroup{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pg); err != nil {
		return nil, fmt.Errorf("PodGroup %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return pg, nil
}

// Validate reports the first field of the PodGroup's spec a scheduler cannot
// act on, naming the field, its value and what is allowed. The CRD's schema
// rejects the same values at admission; this check covers objects created
// before the schema was installed, or without it.
func (pg *PodGroup) Validate() error {
	if pg.Spec.MinMember < 1 {
		return fmt.Errorf("PodGroup %s/%s: spec.minMember is %d; it must be at least 1", pg.Namespace, pg.Name, pg.Spec.MinMember)
	}
	if t := pg.Spec.ScheduleTimeoutSeconds; t != nil && *t < 1 {
		return fmt.Errorf("PodGroup %s/%s: spec.scheduleTimeoutSeconds is %d; it must be at least 1, or unset for the scheduler's default", pg.Namespace, pg.Name, *t)
	}
	_, err := pg.MixedModels()
	return err
}

// MixedModels reports whether the gang may run on GPUs of different models
// (AnnotationGPUModels is "mixed"). Any value other than "one" or "mixed" is
// an error naming the annotation, the value and what is allowed.
func (pg *PodGroup) MixedModels() (bool, error) {
	raw, ok := pg.Annotations[AnnotationGPUModels]
	switch {
	case !ok || raw == GPUModelsOne:
		return false, nil
	case raw == GPUModelsMixed:
		return true, nil
	}
	return false, fmt.Errorf("PodGroup %s/%s: annotation %s is %q; it must be %q (the gang's pods run on one GPU model, the default) or %q (they may run on different models)",
		pg.Namespace, pg.Name, AnnotationGPUModels, raw, GPUModelsOne, GPUModelsMixed)
}

// NameOf returns the PodGroup a pod belongs to: the value of its
// scheduling.x-k8s.io/pod-group label. ok is false for a pod without the
// label. A value that cannot name a PodGroup (not a DNS subdomain) is an error
// naming the label, the value and what is allowed.
func NameOf(pod *v1.Pod) (name string, ok bool, err error) {
	name, ok = pod.Labels[LabelPodGroup]
	if !ok {
		return "", false, nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return name, true, fmt.Errorf("label %s: value %q is not a PodGroup name: %s", LabelPodGroup, name, errs[0])
	}
	return name, true, nil
}

// WorkloadGangPrefix starts the name GangOf gives a gang of the Workload
// API, to tell it from a PodGroup's.
const WorkloadGangPrefix = "workload:"

// GangOf names the gang a pod belongs to: the PodGroup of its
// scheduling.x-k8s.io/pod-group label, or the upstream Workload API's
// PodGroup of its spec.schedulingGroup (prefixed "workload:", as the two
// are different objects that may share a name).
func GangOf(pod *v1.Pod) (string, bool) {
	if name, ok, err := NameOf(pod); ok && err == nil {
		return name, true
	}
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" {
		return WorkloadGangPrefix + *g.PodGroupName, true
	}
	return "", false
}
