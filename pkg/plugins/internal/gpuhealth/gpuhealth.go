// Package gpuhealth carries, within one scheduling cycle, the GPUs that must
// not be given to the pod, from the plugin that knows them (GPUTelemetry's
// health filter) to the plugin that chooses GPUs (GPUPlacement), through the
// cycle's CycleState. A cycle without it excludes nothing.
package gpuhealth

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/internal/cyclestate"
)

// StateKey is where the cycle's excluder is kept.
const StateKey fwk.StateKey = "gpusched.io/excluded-gpus"

// Write records e as the cycle's excluder. Call it in PreFilter, so every
// later extension point of the cycle (Filter, Score, Reserve) sees the same.
func Write(cs fwk.CycleState, e gpu.Excluder) { cyclestate.Write(cs, StateKey, e) }

// Read returns the cycle's excluder, or nil.
func Read(cs fwk.CycleState) gpu.Excluder {
	e, _ := cyclestate.Read[gpu.Excluder](cs, StateKey)
	return e
}
