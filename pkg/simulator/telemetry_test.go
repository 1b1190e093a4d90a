package simulator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/trace"
)

const telemetryProfile = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: telemetry
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
      - name: GPUTelemetry
        weight: 5
  pluginConfig:
  - name: GPUPlacement
    args:
      scoringStrategy:
        type: BestFit
`

// TestReplayTelemetry replays telemetry in which n0 is busy until second 5
// and n1 after it: the pod arriving at 0 goes to n1, the one arriving at 10
// to n0 — although BestFit alone would put it beside the first on n1.
// Without telemetry both go to one node.
func TestReplayTelemetry(t *testing.T) {
	cfg, err := LoadConfig(writeFile(t, "config.yaml", telemetryProfile))
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := ProfilesFor(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	replay, err := trace.LoadTelemetry(writeFile(t, "telemetry.csv", `time,node,gpu,signal,value
0,n0,0,DCGM_FI_DEV_GPU_UTIL,95
0,n0,1,DCGM_FI_DEV_GPU_UTIL,95
0,n1,0,DCGM_FI_DEV_GPU_UTIL,0
0,n1,1,DCGM_FI_DEV_GPU_UTIL,0
5,n0,0,DCGM_FI_DEV_GPU_UTIL,0
5,n0,1,DCGM_FI_DEV_GPU_UTIL,0
5,n1,0,DCGM_FI_DEV_GPU_UTIL,95
5,n1,1,DCGM_FI_DEV_GPU_UTIL,95
`))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*v1.Node{trace.NewNode("n0", 8000, 65536, 2, "T4"), trace.NewNode("n1", 8000, 65536, 2, "T4")}
	pods := []trace.Pod{
		{Pod: trace.NewPod("p1", 1000, 1024, 1, 1000, nil), Created: 0, Deleted: trace.NeverDeleted, HasTimes: true},
		{Pod: trace.NewPod("p2", 1000, 1024, 1, 1000, nil), Created: 10, Deleted: trace.NeverDeleted, HasTimes: true},
	}
	placements := func(opts Options) string {
		runs, err := Simulate(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range runs[0].Placements {
			out = append(out, p.Pod+"→"+p.Node)
		}
		return strings.Join(out, " ")
	}
	opts := Options{Nodes: nodes, Pods: pods, Profiles: profiles, Seeds: []int64{1}, Arrival: trace.ArrivalReplay,
		RecordPlacements: true, Telemetry: replay, Parallel: 1}
	if got, want := placements(opts), "p1→n1 p2→n0"; got != want {
		t.Errorf("with telemetry: %s, want %s", got, want)
	}
	opts.Telemetry = nil
	got := placements(opts)
	if got != "p1→n0 p2→n0" && got != "p1→n1 p2→n1" {
		t.Errorf("without telemetry: %s, want both pods on one node (BestFit)", got)
	}
}

// writeFile writes content to a file name in a temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	mustWrite(t, path, content)
	return path
}

// TestTelemetryFlag: --telemetry loads the file into the options, and a
// malformed file stops the command with its file and line.
func TestTelemetryFlag(t *testing.T) {
	good := writeFile(t, "good.csv", "time,node,gpu,signal,value\n0,n0,0,DCGM_FI_DEV_GPU_UTIL,5\n")
	opts, _, err := optionsFromFlags(flags{arrival: "fgd", seeds: "1", telemetry: good})
	if err != nil || opts.Telemetry == nil || opts.Telemetry.Len() != 1 {
		t.Errorf("--telemetry %s: options %+v, error %v; want one sample time", good, opts.Telemetry, err)
	}
	bad := writeFile(t, "bad.csv", "time,node,gpu,signal,value\n0,n0,0,DCGM_FI_DEV_GPU_UTIL,busy\n")
	if _, _, err := optionsFromFlags(flags{arrival: "fgd", seeds: "1", telemetry: bad}); err == nil || !strings.Contains(err.Error(), "bad.csv:2:") {
		t.Errorf("--telemetry %s: error %v, want one naming bad.csv:2", bad, err)
	}
	if opts, _, err := optionsFromFlags(flags{arrival: "fgd", seeds: "1"}); err != nil || opts.Telemetry != nil {
		t.Errorf("no --telemetry: telemetry %v, error %v; want none", opts.Telemetry, err)
	}
}

// FuzzLoadTelemetry: any file either loads or is rejected with its name;
// none panics.
func FuzzLoadTelemetry(f *testing.F) {
	f.Add("time,node,gpu,signal,value\n0,n0,0,DCGM_FI_DEV_GPU_UTIL,5\n")
	f.Add("time,node,gpu,signal,value\n0,n0,GPU-a,DCGM_FI_DEV_XID_ERRORS,79\n9,n1,3,DCGM_FI_PROF_DRAM_ACTIVE,0.5\n")
	f.Add("time,node\n\"unterminated\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "fuzz.csv")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		replay, err := trace.LoadTelemetry(path)
		if err != nil && !strings.Contains(err.Error(), "fuzz.csv") {
			t.Fatalf("error %q does not name the file", err)
		}
		if err == nil && replay.Len() == 0 {
			t.Fatal("loaded without samples")
		}
	})
}
