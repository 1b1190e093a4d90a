// Package cyclestate keeps one value in a scheduling cycle's CycleState
// under a key, for the packages through which one plugin hands something to
// the others of its cycle (gpuhealth, gpuledger, gangview): the plugins find
// each other through the cycle, never through package-level registries.
package cyclestate

import fwk "k8s.io/kube-scheduler/framework"

// entry holds the value in the CycleState.
type entry[T any] struct{ v T }

// Clone implements fwk.StateData. The value is shared, not copied: it is
// immutable, or shared on purpose (a preemption's clone of the cycle must
// see the same ledger).
func (e *entry[T]) Clone() fwk.StateData { return e }

// Write keeps v in the cycle under key.
func Write[T any](cs fwk.CycleState, key fwk.StateKey, v T) { cs.Write(key, &entry[T]{v: v}) }

// Read returns the value kept under key, and whether there is one of type T.
func Read[T any](cs fwk.CycleState, key fwk.StateKey) (T, bool) {
	var zero T
	if cs == nil {
		return zero, false
	}
	data, err := cs.Read(key)
	if err != nil {
		return zero, false
	}
	e, ok := data.(*entry[T])
	if !ok {
		return zero, false
	}
	return e.v, true
}
