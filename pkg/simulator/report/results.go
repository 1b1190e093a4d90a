package report

import (
	"math"

	"github.com/gpusched/gpusched/pkg/trace"
)

// Run is the result of one (profile, seed) run.
type Run struct {
	Policy string `json:"policy"`
	Seed   int64  `json:"seed"`
	// UnallocatedPctAt100 is 100 − the allocation at arrived 100%: the
	// headline of the FGD paper's evaluation. It is nil when the workload
	// never reached 100% of the cluster's GPU capacity.
	UnallocatedPctAt100 *float64 `json:"unallocated_pct_at_100"`
	Submitted           int      `json:"submitted_pods"`
	Placed              int      `json:"placed_pods"`
	Failed              int      `json:"failed_pods"`
	// FailedGPUMilli is the GPU request of the failed pods.
	FailedGPUMilli int64 `json:"failed_gpu_milli"`
	// FailureReasons counts the failed pods by their FailedScheduling message.
	FailureReasons map[string]int    `json:"failure_reasons,omitempty"`
	Curve          []Point           `json:"curve"`
	ByModel        []ModelAllocation `json:"allocation_by_model"`
	WallSeconds    float64           `json:"wall_seconds"`
	// SchedulingSeconds is the time spent in scheduling cycles (framework,
	// plugins, engine); MetricsSeconds the time spent measuring.
	SchedulingSeconds float64 `json:"scheduling_seconds"`
	MetricsSeconds    float64 `json:"metrics_seconds"`
	// StrandedAt100 is where the unallocated GPU capacity sits when the
	// arrived workload reaches the cluster's capacity (strandedAt): free
	// milli-GPU by the largest share on its GPU, or "idle". nil for replay
	// arrival.
	StrandedAt100 map[string]int64 `json:"stranded_at_100,omitempty"`
	// Placements is every submitted pod's outcome, in submission order,
	// when Options.RecordPlacements is set.
	Placements []PodPlacement `json:"placements,omitempty"`
	// Migrations is what the profile's migrations did (Profile.Migrations);
	// nil for a profile that moves no pod.
	Migrations *MigrationStats `json:"migrations,omitempty"`
}

// PodPlacement is where one pod went: its node and GPUs (the assignment's
// device indices), or nowhere, with the reason.
// A pod moved to make room for another (Profile.Migrations) is where it
// moved last, with the number of its moves.
type PodPlacement struct {
	Pod    string `json:"pod"`
	Node   string `json:"node,omitempty"`
	GPUs   []int  `json:"gpus,omitempty"`
	Reason string `json:"reason,omitempty"`
	Moves  int    `json:"moves,omitempty"`
}

// Point is the allocation curve at one bucket of arrived workload.
type Point struct {
	// ArrivedPct is the bucket: the GPU request submitted so far (placed or
	// not) as a percentage of the cluster's GPU capacity, rounded to an
	// integer, half to even.
	ArrivedPct int `json:"arrived_pct"`
	// AllocatedPct is the mean over the bucket's events of the allocated GPU
	// milli as a percentage of capacity (each event rounded to 2 decimals,
	// the mean too, as the FGD paper's analysis does).
	AllocatedPct float64 `json:"allocated_pct"`
	// FragmentedPct is the mean of the cluster's fragmented GPU milli (see
	// gpu.NodeGPUs.Fragment) as a percentage of capacity.
	FragmentedPct float64 `json:"fragmented_pct"`
	Events        int     `json:"events"`
}

// ModelAllocation is the GPU allocation of one GPU model.
type ModelAllocation struct {
	Model        string  `json:"model"`
	GPUs         int     `json:"gpus"`
	AllocatedPct float64 `json:"allocated_pct"`
}

// MigrationStats is what a run's migrations did.
type MigrationStats struct {
	Budget string `json:"budget"`
	// Plans is the plans carried out, Moves the pods they moved.
	Plans int `json:"plans"`
	Moves int `json:"moves"`
	// MovedPct is Moves per 100 placed pods.
	MovedPct float64 `json:"moved_pct"`
	// GPUMilliPlaced is the GPU of the pods the plans made room for; PlacedByPlans those pods.
	GPUMilliPlaced int64 `json:"gpu_milli_placed"`
	PlacedByPlans  int   `json:"placed_by_plans"`
	// MovesPerGPU is pods moved per GPU placed by plans.
	MovesPerGPU float64 `json:"moves_per_gpu"`
	// Returned counts moved pods that their planned node refused (the
	// framework's Filter disagreeing with the plan) and went back where
	// they were; Lost counts pods no node took. Both are 0 unless the
	// planner and the Filter plugins disagree.
	Returned int `json:"returned,omitempty"`
	Lost     int `json:"lost,omitempty"`
}

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

// Round2 rounds x to two decimals, half to even: how every percentage of a
// run and a report is rounded, as the FGD paper's analysis rounds them.
func Round2(x float64) float64 { return math.RoundToEven(x*100) / 100 }
