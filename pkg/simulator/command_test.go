package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpusched/gpusched/pkg/simulator/report"
)

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		in   string
		want []int64
	}{
		{"42", []int64{42}},
		{"42..45", []int64{42, 43, 44, 45}},
		{"1, 5,9", []int64{1, 5, 9}},
	}
	for _, tt := range tests {
		if got, err := ParseSeeds(tt.in); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "x", "5..1", "1..", "1,,2"} {
		if _, err := ParseSeeds(bad); err == nil || !strings.Contains(err.Error(), "want N, N..M") {
			t.Errorf("ParseSeeds(%q) error = %v; want one saying what is allowed", bad, err)
		}
	}
}

// TestBadFlags: each bad flag is reported with its value and what is allowed.
func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		f    flags
		want string
	}{
		{"arrival", flags{arrival: "poisson", seeds: "1"}, `--arrival "poisson": want fgd or replay`},
		{"nodes without pods", flags{arrival: "fgd", seeds: "1", nodes: "n.csv"}, "--nodes and --pods go together"},
		{"unknown policy", flags{arrival: "fgd", seeds: "1", policies: "BestFit,Tetris"}, `--policies: unknown policy "Tetris": want one of BestFit, Spread, Packing`},
		{"missing file", flags{arrival: "fgd", seeds: "1", nodes: "/nonexistent/n.csv", pods: "p.csv"}, "/nonexistent/n.csv"},
		{"config", flags{arrival: "fgd", seeds: "1", config: "/nonexistent/c.yaml"}, "/nonexistent/c.yaml"},
		{"parallel", flags{arrival: "fgd", seeds: "1", parallel: -1}, "--parallel -1: want 0"},
		{"shares", flags{arrival: "fgd", seeds: "1", shares: "labels"}, `--shares "labels": want annotation (the gpusched.io/gpu-milli annotation) or resources`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := optionsFromFlags(tt.f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestConfigProfiles: a KubeSchedulerConfiguration's GPUPlacement args are
// validated as the scheduler validates them, and --policies sets the type.
func TestConfigProfiles(t *testing.T) {
	bad := writeFile(t, "bad.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: GPUPlacement
    args:
      scoringStrategy:
        type: Tetris
`)
	if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), `scoringStrategy.type: Invalid value: "Tetris": unknown policy "Tetris": want one of`) {
		t.Errorf("error = %v, want the unsupported type named", err)
	}
	cfg, err := LoadConfig("../../examples/gpusched-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := ProfilesFor(cfg, []string{"default", "Spread", "GpuPacking"})
	if err != nil {
		t.Fatal(err)
	}
	// "default" is GPUPlacement's default policy, named beside it.
	if p := profiles[0]; p.Name != "default (PairFit)" || gpuPlacementArgs(p.Profile).ScoringStrategy.Type != "PairFit" {
		t.Errorf("default profile = %s with type %s, want \"default (PairFit)\" with PairFit", p.Name, gpuPlacementArgs(p.Profile).ScoringStrategy.Type)
	}
	for i, want := range []string{"Spread", "GpuPacking"} {
		if p := profiles[i+1]; p.Name != want || string(gpuPlacementArgs(p.Profile).ScoringStrategy.Type) != want {
			t.Errorf("profile %d = %s with type %s, want %s", i+1, p.Name, gpuPlacementArgs(p.Profile).ScoringStrategy.Type, want)
		}
	}
	// The original configuration (PairFit) is left as it was, though the
	// last profile made from it is GpuPacking.
	if got := gpuPlacementArgs(&cfg.Profiles[0]).ScoringStrategy.Type; got != "PairFit" {
		t.Errorf("the config's own profile now has type %s, want PairFit", got)
	}
}

// The scheduler command prints its own flag sections as help; simulate,
// added under it, must print its own flags instead.
func TestHelpShowsSimulateFlags(t *testing.T) {
	root := &cobra.Command{Use: "gpusched"}
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(c.OutOrStdout(), "scheduler flag sections") })
	root.SetUsageFunc(func(c *cobra.Command) error { fmt.Fprint(c.OutOrStderr(), "scheduler usage"); return nil })
	root.AddCommand(NewCommand())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"simulate", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{"Usage:\n  gpusched simulate [flags]", "--policies", "--seeds", "--tie-break", "Examples:"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "scheduler flag sections") || strings.Contains(help, "scheduler usage") {
		t.Errorf("help shows the scheduler command's help:\n%s", help)
	}
}

// TestPlacementsFlag: --placements puts every submitted pod's outcome in the
// JSON report's runs, a node for each placed pod and a reason for each
// refused one; without it the runs carry none.
func TestPlacementsFlag(t *testing.T) {
	dir := t.TempDir()
	nodes, pods := writeSweepInputs(t, dir)
	pods, _, _ = strings.Cut(pods, ",") // one pod list: a report, not a sweep
	for _, record := range []bool{true, false} {
		out := filepath.Join(dir, fmt.Sprintf("report-%v.json", record))
		args := []string{"--nodes", nodes, "--pods", pods, "--policies", "BestFit", "--seeds", "1,2", "--quiet", "--json", out}
		if record {
			args = append(args, "--placements")
		}
		if stdout, stderr, err := simulateProcess(t, nil, args...); err != nil {
			t.Fatalf("%v\n%s%s", err, stdout, stderr)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var report struct {
			Runs []report.Run `json:"runs"`
		}
		if err := json.Unmarshal(data, &report); err != nil {
			t.Fatal(err)
		}
		if len(report.Runs) != 2 {
			t.Fatalf("--placements=%v: %d runs, want 2", record, len(report.Runs))
		}
		for _, run := range report.Runs {
			if !record {
				if len(run.Placements) != 0 {
					t.Errorf("seed %d: %d placements recorded without --placements", run.Seed, len(run.Placements))
				}
				continue
			}
			if len(run.Placements) != run.Submitted {
				t.Errorf("seed %d: %d placements for %d submitted pods", run.Seed, len(run.Placements), run.Submitted)
			}
			var refused int
			for _, p := range run.Placements {
				switch {
				case p.Node == "" && p.Reason == "":
					t.Errorf("seed %d: pod %s neither placed nor refused with a reason", run.Seed, p.Pod)
				case p.Node == "":
					refused++
				}
			}
			if refused != run.Failed {
				t.Errorf("seed %d: %d placements without a node, %d pods failed", run.Seed, refused, run.Failed)
			}
		}
	}
}
