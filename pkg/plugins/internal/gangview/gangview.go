// Package gangview hands GPUGang's knowledge of gangs to the other plugins
// of the same scheduling cycle (GPUPreemption) through the cycle's
// CycleState, instead of a package-level registry of plugin instances.
// GPUGang writes it at the start of PreFilter; a cycle of a profile without
// GPUGang has none, and its pods are in no gang.
package gangview

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/internal/cyclestate"
)

// StateKey is where the cycle's view of gangs is kept.
const StateKey fwk.StateKey = "gpusched.io/gangs"

// Gangs is what GPUGang knows of the gangs of the profile's pods.
type Gangs interface {
	// FitAfterEviction is whether the cycle's gang pod's gang could still
	// reach minMember if every pod for which evicted is true were gone:
	// the GPU demands of its members neither reserved nor bound (their
	// annotations, resources or claims, as GPUGang's PreFilter reads
	// them) placed on the nodes their GPUs may go to, each node's GPUs as
	// they would be after those evictions. key is the gang's
	// "namespace/name" and needed how many members must still be placed;
	// reason is empty when they fit (or none is needed) and else says what
	// they lack. ok is false for a pod outside a gang, or a profile
	// without GPUPlacement, whose ledger says what each pod holds.
	FitAfterEviction(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, evicted func(*v1.Pod) bool) (key string, needed int, reason string, ok bool)
	// Siblings returns the gang pod belongs to ("namespace/name") and its
	// bound members, pod included; an empty key for a pod outside a gang.
	Siblings(pod *v1.Pod) (key string, bound []*v1.Pod)
}

// Write records g as the cycle's view of gangs.
func Write(cs fwk.CycleState, g Gangs) { cyclestate.Write(cs, StateKey, g) }

// Read returns the cycle's view of gangs, or nil.
func Read(cs fwk.CycleState) Gangs {
	g, _ := cyclestate.Read[Gangs](cs, StateKey)
	return g
}
