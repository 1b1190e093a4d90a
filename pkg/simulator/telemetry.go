package simulator

import (
	"fmt"
	"sync/atomic"
	"time"

	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/plugins/gputelemetry"
	"github.com/gpusched/gpusched/pkg/telemetry"
	"github.com/gpusched/gpusched/pkg/trace"
)

// replayClock is a run's simulated time in seconds: the current event's time
// with --arrival replay, the arrival's position with --arrival fgd.
type replayClock struct{ seconds atomic.Int64 }

func (c *replayClock) set(s int64) { c.seconds.Store(s) }

func (c *replayClock) now() time.Time {
	return trace.TelemetryEpoch.Add(time.Duration(c.seconds.Load()) * time.Second)
}

// replaySource serves a replay's snapshot at the run's simulated time.
type replaySource struct {
	replay *telemetry.Replay
	clock  *replayClock
}

func (s *replaySource) Latest() *telemetry.Snapshot {
	if s.replay == nil {
		return nil
	}
	return s.replay.At(s.clock.seconds.Load())
}

// runRegistry is Registry with GPUTelemetry reading the run's replayed
// telemetry at its simulated time instead of querying Prometheus, and
// GPUPlacement measuring fragmentation against the workload's typical pods,
// fixed for the run (gpuplacement.NewWithShapes), as the FGD paper
// measures, unless the profile's args configure typical pods. Without a
// replay the telemetry is missing, as when Prometheus is unreachable: its
// dynamic signals score neutral and nothing is filtered.
func runRegistry(replay *telemetry.Replay, clock *replayClock, typical []gpu.TypicalPod) (frameworkruntime.Registry, error) {
	r := Registry()
	for name, factory := range map[string]frameworkruntime.PluginFactory{
		gputelemetry.Name: gputelemetry.NewWithSource(&replaySource{replay: replay, clock: clock}, clock.now),
		gpuplacement.Name: gpuplacement.NewWithShapes(gpu.StaticShapes(typical)),
	} {
		if err := r.Unregister(name); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		if err := r.Register(name, factory); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
	}
	return r, nil
}
