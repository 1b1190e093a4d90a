package scheme_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// TestLoadTelemetryConfig reads GPUTelemetryArgs with the kube-scheduler's
// own loader: they decode, default and convert like in-tree args.
func TestLoadTelemetryConfig(t *testing.T) {
	const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
      - name: GPUTelemetry
  pluginConfig:
  - name: GPUTelemetry
    args:
`
	tests := []struct {
		name    string
		args    string
		check   func(*config.GPUTelemetryArgs) bool
		wantErr string
	}{
		{
			name: "address and one weight; the rest defaulted",
			args: "      prometheus:\n        address: http://127.0.0.1:9090\n      weights:\n        video: 5\n      maxAge: 2m\n",
			check: func(a *config.GPUTelemetryArgs) bool {
				return a.Prometheus.Address == "http://127.0.0.1:9090" && a.Weights.Video == 5 && a.Weights.Utilization == 3 &&
					a.MaxAge.Duration == 2*time.Minute && a.RefreshInterval.Duration == 15*time.Second && a.Health.Enabled
			},
		},
		{
			name:    "an unknown field is rejected",
			args:    "      prometheus:\n        url: http://127.0.0.1:9090\n",
			wantErr: `unknown field "prometheus.url"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := loadPluginArgs(t, header+tt.args, "GPUTelemetry")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := args.(*config.GPUTelemetryArgs)
			if got == nil || !tt.check(got) {
				t.Fatalf("args %+v", got)
			}
		})
	}
}

// TestTelemetryExample loads examples/gpusched-telemetry-config.yaml as the
// scheduler would.
func TestTelemetryExample(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, filepath.Join("..", "..", "..", "..", "examples", "gpusched-telemetry-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if a, ok := pc.Args.(*config.GPUTelemetryArgs); ok {
			if a.Prometheus.Address == "" || a.Weights.Utilization != 3 || !a.Health.Enabled || a.Health.XIDWindow.Duration != 10*time.Minute {
				t.Errorf("GPUTelemetry args %+v", a)
			}
			return
		}
	}
	t.Fatal("no GPUTelemetryArgs in the example")
}
