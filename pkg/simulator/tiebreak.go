package simulator

import "github.com/gpusched/gpusched/pkg/trace"

// TieBreak is how a run chooses among equally scored nodes.
type TieBreak string

const (
	// TieBreakRandom draws one uniformly with the run's seeded generator, as
	// kube-scheduler does.
	TieBreakRandom TieBreak = "random"
	// TieBreakNodeOrder takes the first in an order of the nodes drawn once
	// per run from its seed. This is what the FGD paper's simulator does in
	// effect, and it matters: it packs pods that every node scores alike
	// (pods without GPUs under the GPU-only policies) onto the same nodes.
	TieBreakNodeOrder TieBreak = "node-order"
)

// DefaultTieBreak is the tie-break of an arrival mode: the reference's for
// trace.ArrivalFGD, kube-scheduler's for trace.ArrivalReplay.
func DefaultTieBreak(a trace.Arrival) TieBreak {
	if a == trace.ArrivalFGD {
		return TieBreakNodeOrder
	}
	return TieBreakRandom
}
