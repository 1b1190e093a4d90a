package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/chromiumtest"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestTraceSlice runs a slice of the public Alibaba trace — its first 200
// GPU nodes and the first 1500 pods of the default workload — through both
// arrival modes.
func TestTraceSlice(t *testing.T) {
	opts, _ := loadTrace(t, "openb_pod_list_default.csv")
	opts.Nodes, opts.Pods = opts.Nodes[:200], opts.Pods[:1500]
	opts.Profiles = defaultProfiles(t, "BestFitCPUGPU", "GpuPacking")
	opts.Seeds = []int64{42, 43}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.UnallocatedPctAt100 == nil || *r.UnallocatedPctAt100 < 0 || *r.UnallocatedPctAt100 > 50 {
			t.Errorf("%s seed %d: unallocated at 100%% = %v, want a value in 0..50", r.Policy, r.Seed, r.UnallocatedPctAt100)
		}
		// Topped up to 130% of capacity, some pods must fail.
		if r.Failed == 0 || r.Placed+r.Failed != r.Submitted {
			t.Errorf("%s seed %d: %d placed + %d failed of %d submitted; want failures, and every pod accounted for", r.Policy, r.Seed, r.Placed, r.Failed, r.Submitted)
		}
		last := r.Curve[len(r.Curve)-1]
		if last.ArrivedPct < 125 || last.AllocatedPct > 100 {
			t.Errorf("%s seed %d: curve ends at arrived %d%%, allocated %.2f%%; want ≥ 125%% arrived, ≤ 100%% allocated", r.Policy, r.Seed, last.ArrivedPct, last.AllocatedPct)
		}
	}
	if reflectEqualCurves(runs[0], runs[1]) {
		t.Error("seeds 42 and 43 gave the same curve")
	}

	// Replay: pods leave at their deletion times, so the cluster is never
	// over-full and most pods run.
	opts.Arrival, opts.Seeds = trace.ArrivalReplay, []int64{1}
	replay, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range replay {
		if r.Submitted != 1500 || r.Placed < 1000 {
			t.Errorf("replay %s: %d of %d placed; want all 1500 submitted, most placed", r.Policy, r.Placed, r.Submitted)
		}
	}
}

func reflectEqualCurves(a, b report.Run) bool {
	if len(a.Curve) != len(b.Curve) {
		return false
	}
	for i := range a.Curve {
		if a.Curve[i] != b.Curve[i] {
			return false
		}
	}
	return true
}

// TestMultiGPUTraceLoads: the five-column multi-GPU workloads load.
func TestMultiGPUTraceLoads(t *testing.T) {
	opts, _ := loadTrace(t, "openb_pod_list_multigpu20.csv")
	if len(opts.Pods) != 8324 || opts.Pods[0].HasTimes {
		t.Errorf("multigpu20: %d pods (times %v), want 8324 without times", len(opts.Pods), opts.Pods[0].HasTimes)
	}
}

// TestCommandSynthetic runs `gpusched simulate` with no input files (the
// built-in synthetic cluster and workload), writes the JSON and HTML
// reports, and renders the HTML in headless Chromium to check that every
// chart drew.
func TestCommandSynthetic(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	var stdout, stderr bytes.Buffer
	f := flags{policies: "BestFit,GpuPacking,Random", seeds: "1..3", arrival: "fgd", jsonOut: jsonPath, htmlOut: htmlPath}
	if err := runCommand(context.Background(), f, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	for _, policy := range []string{"BestFit", "GpuPacking", "Random"} {
		if !regexp.MustCompile(`(?m)^` + policy + `\s+\d+\.\d\d ± \d+\.\d\d\s+\d+ ± \d+\s+3\s`).MatchString(stdout.String()) {
			t.Errorf("table has no line for %s with mean ± sd over 3 seeds:\n%s", policy, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "100%") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}

	var got struct {
		Summary []struct {
			Policy              string
			UnallocatedPctAt100 struct{ Mean, SD float64 } `json:"unallocated_pct_at_100"`
			Seeds               int
			Curve               []report.Point
		}
		Runs []struct {
			Policy              string
			Seed                int64
			UnallocatedPctAt100 *float64 `json:"unallocated_pct_at_100"`
			WallSeconds         float64  `json:"wall_seconds"`
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Summary) != 3 || len(got.Runs) != 9 {
		t.Fatalf("JSON has %d summaries and %d runs, want 3 and 9", len(got.Summary), len(got.Runs))
	}
	for _, s := range got.Summary {
		var vals []float64
		for _, r := range got.Runs {
			if r.Policy == s.Policy {
				vals = append(vals, *r.UnallocatedPctAt100)
			}
		}
		if mean := meanOf(vals); math.Abs(mean-s.UnallocatedPctAt100.Mean) > 0.01 || s.Seeds != 3 || len(s.Curve) == 0 {
			t.Errorf("%s: summary %+v does not match its runs %v", s.Policy, s, vals)
		}
	}

	dom := renderHTML(t, htmlPath)
	for _, chart := range []string{"unallocated", "zoom", "fragmentation", "models"} {
		svg := regexp.MustCompile(`(?s)<svg[^>]*data-chart="` + chart + `"[^>]*>.*?</svg>`).FindString(dom)
		if !strings.Contains(svg, `data-drawn="true"`) {
			t.Errorf("chart %s did not draw", chart)
		}
		for _, policy := range []string{"BestFit", "GpuPacking", "Random"} {
			if !strings.Contains(svg, `data-series="`+policy+`"`) {
				t.Errorf("chart %s has no series for %s", chart, policy)
			}
		}
	}
	if m := regexp.MustCompile(`<body[^>]*data-error="([^"]*)"`).FindStringSubmatch(dom); m != nil {
		t.Errorf("the report's script failed: %s", m[1])
	}
	if regexp.MustCompile(`(?i)<(script|link|img)[^>]+(src|href)="https?:`).MatchString(dom) {
		t.Error("the report loads something from the network")
	}
}

// renderHTML loads a page in headless Chromium and returns its DOM after
// scripts ran.
func renderHTML(t *testing.T, path string) string {
	t.Helper()
	abs, _ := filepath.Abs(path)
	return chromiumtest.Run(context.Background(), t, chromiumtest.Path(t), "--dump-dom", "file://"+abs)
}

// meanOf is the mean of xs.
func meanOf(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
