package scheme_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestLoadConfig reads KubeSchedulerConfigurations with the kube-scheduler's
// own loader: GPUPlacementArgs decode, default and convert like in-tree args.
func TestLoadConfig(t *testing.T) {
	const header = `apiVersion: kubescheduler.config.k8s.io/v1
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
`
	tests := []struct {
		name    string
		args    string
		want    config.ScoringStrategy
		wantErr string
	}{
		{
			name: "empty args take the defaults",
			args: "      {}\n",
			want: config.ScoringStrategy{Type: gpu.PolicyPairFit, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 1}}},
		},
		{
			name: "packing on compute and memory",
			args: "      scoringStrategy:\n        type: Packing\n        resources:\n        - name: nvidia.com/gpu\n          weight: 2\n        - name: gpusched.io/gpu-memory\n",
			want: config.ScoringStrategy{Type: gpu.PolicyPacking, Resources: []config.ResourceSpec{{Name: config.ResourceGPU, Weight: 2}, {Name: config.ResourceGPUMemory, Weight: 1}}},
		},
		{
			name:    "an unknown field is rejected",
			args:    "      scoringStrategy:\n        kind: Packing\n",
			wantErr: `unknown field "scoringStrategy.kind"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := loadPluginArgs(t, header+tt.args, "GPUPlacement")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := args.(*config.GPUPlacementArgs)
			if got == nil {
				t.Fatalf("no GPUPlacementArgs: %T", args)
			}
			if got.ScoringStrategy.Type != tt.want.Type || len(got.ScoringStrategy.Resources) != len(tt.want.Resources) {
				t.Fatalf("strategy %+v, want %+v", got.ScoringStrategy, tt.want)
			}
			for i, r := range tt.want.Resources {
				if got.ScoringStrategy.Resources[i] != r {
					t.Errorf("resource %d: %+v, want %+v", i, got.ScoringStrategy.Resources[i], r)
				}
			}
		})
	}
}

// loadPluginArgs writes a KubeSchedulerConfiguration to a file, loads it with
// the kube-scheduler's own loader (decoding, defaulting, conversion,
// validation) and returns the args of plugin in its first profile: nil when
// the profile configures none, or the loader's error.
func loadPluginArgs(t *testing.T, configuration, plugin string) (runtime.Object, error) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(configuration), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(logger, file)
	if err != nil {
		return nil, err
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == plugin {
			return pc.Args, nil
		}
	}
	return nil, nil
}

// bindSettleAfter goes through the kube-scheduler's loader: read as a
// duration, refused when negative.
func TestLoadBindSettleAfter(t *testing.T) {
	const file = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpusched
  pluginConfig:
  - name: GPUPlacement
    args:
      bindSettleAfter: %s
`
	args, err := loadPluginArgs(t, fmt.Sprintf(file, "90s"), "GPUPlacement")
	if err != nil {
		t.Fatal(err)
	}
	if got := args.(*config.GPUPlacementArgs).BindSettleAfter; got != 90*time.Second {
		t.Errorf("bindSettleAfter 90s loaded as %v", got)
	}
	// The loader leaves out-of-tree args to their plugin, which validates
	// them in New (load.GPUPlacementArgs).
	args, err = loadPluginArgs(t, fmt.Sprintf(file, "-5s"), "GPUPlacement")
	if err == nil {
		_, err = load.GPUPlacementArgs(args)
	}
	if err == nil || !strings.Contains(err.Error(), "bindSettleAfter") {
		t.Errorf("bindSettleAfter -5s: %v, want an error naming the field", err)
	}
}
