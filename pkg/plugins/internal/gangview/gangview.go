// Package gangview hands GPUGang's knowledge of gangs to the other plugins
// of the same scheduling cycle (GPUPreemption) through the cycle's
// CycleState, instead of a package-level registry of plugin instances.
// GPUGang writes it at the start of PreFilter; a cycle of a profile without
// GPUGang has none, and its pods are in no gang.
package gangview

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/internal/cyclestate"
)

// StateKey is where the cycle's view of gangs is kept.
const StateKey fwk.StateKey = "gpusched.io/gangs"

// Gangs is what GPUGang knows of the gangs of the profile's pods.
type Gangs interface {
	// Unplaced is what the cycle's gang pod still lacks, as GPUGang's
	// PreFilter read the gang in this cycle: key is the gang's
	// "namespace/name", pending its members neither reserved nor bound
	// (the pod of the cycle among them), and needed how many of those must
	// still be placed for the gang to reach minMember. ok is false for a
	// pod outside a gang.
	Unplaced(state fwk.CycleState) (key string, pending []*v1.Pod, needed int, ok bool)
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
