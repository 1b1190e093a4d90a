package trace

import (
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// telemetryColumns are the columns of a telemetry file (docs/simulator.md).
var telemetryColumns = []string{"time", "node", "gpu", "signal", "value"}

// TelemetryEpoch is the wall-clock time of second 0 of a replay; the
// plugins see snapshot ages, never the epoch itself.
var TelemetryEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// replayHealthWindow is the XID window the replayed snapshots report; a
// recorded DCGM_FI_DEV_XID_ERRORS value holds until the next sample of it.
const replayHealthWindow = 10 * time.Minute

// LoadTelemetry reads recorded GPU telemetry for --telemetry: a CSV file with
// the header time,node,gpu,signal,value, one sample per row. time is whole
// seconds from the start of the trace (the pods' creation_time clock); gpu
// is the GPU's index on the node or its UUID ("GPU-..."); signal is a DCGM
// field name such as DCGM_FI_DEV_GPU_UTIL; value is a finite number. A
// malformed row is an error naming the file, line, column and what is allowed.
func LoadTelemetry(path string) (*telemetry.Replay, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := newCSVTable(path, data, telemetryColumns, nil)
	if err != nil {
		return nil, err
	}
	var signals []string
	for s := range telemetry.NumSignals {
		signals = append(signals, s.Metric())
	}
	var samples []telemetry.Sample
	for {
		if err := t.next(); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		var s telemetry.Sample
		if s.Seconds, err = t.int("time", NeverDeleted); err != nil {
			return nil, err
		}
		if s.Node = t.str("node"); s.Node == "" {
			return nil, t.errorAt("node", "want a node name")
		}
		g := t.str("gpu")
		if strings.HasPrefix(g, "GPU-") || strings.HasPrefix(g, "MIG-") {
			s.UUID, s.Index = g, -1
		} else if i, err := strconv.Atoi(g); err == nil && i >= 0 {
			s.Index = i
		} else {
			return nil, t.errorAt("gpu", "want the GPU's index (0, 1, ...) or its UUID (GPU-...)")
		}
		sig, ok := telemetry.SignalOf(t.str("signal"))
		if !ok {
			return nil, t.errorAt("signal", "want one of %s", strings.Join(signals, ", "))
		}
		s.Signal = sig
		v, err := strconv.ParseFloat(t.str("value"), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, t.errorAt("value", "want a finite number")
		}
		s.Value = v
		samples = append(samples, s)
	}
	if len(samples) == 0 {
		return nil, &InputError{File: path, Msg: "no samples: want one row per sample after the header " + strings.Join(telemetryColumns, ",")}
	}
	return telemetry.NewReplay(samples, TelemetryEpoch, replayHealthWindow), nil
}
