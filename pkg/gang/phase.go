package gang

import "github.com/gpusched/gpusched/pkg/podgroup"

// Counts are a gang's pods by state, as the scheduler sees them.
type Counts struct {
	// Total is the number of the gang's pods that exist and have not
	// terminated, plus Succeeded and Failed.
	Total int
	// Reserved pods hold GPUs in the scheduler and wait at Permit.
	Reserved int
	// Bound pods have a node; Running, Succeeded and Failed are pod phases.
	Bound, Running, Succeeded, Failed int
}

// PhaseOf is the phase of a gang that needs minMember pods placed together;
// see the constants of package podgroup for what each means.
func PhaseOf(minMember int, c Counts) podgroup.Phase {
	switch {
	case c.Failed > 0:
		return podgroup.PhaseFailed
	case c.Succeeded >= minMember:
		return podgroup.PhaseFinished
	case c.Running >= minMember:
		return podgroup.PhaseRunning
	case c.Bound >= minMember:
		return podgroup.PhaseScheduled
	case c.Reserved+c.Bound > 0:
		return podgroup.PhaseScheduling
	case c.Total >= minMember:
		return podgroup.PhasePreScheduling
	default:
		return podgroup.PhasePending
	}
}
