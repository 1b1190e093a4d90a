package scheme_test

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// TestLoadGangConfig reads GPUGangArgs with the kube-scheduler's own loader.
func TestLoadGangConfig(t *testing.T) {
	const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpusched
  pluginConfig:
  - name: GPUGang
    args:
`
	tests := []struct {
		name    string
		args    string
		want    config.GPUGangArgs
		wantErr string
	}{
		{name: "defaults", args: "      {}\n", want: config.GPUGangArgs{ScheduleTimeoutSeconds: 60, BackoffSeconds: 10}},
		{name: "set", args: "      scheduleTimeoutSeconds: 5\n      backoffSeconds: 1\n      topologyKey: example.com/rack\n",
			want: config.GPUGangArgs{ScheduleTimeoutSeconds: 5, BackoffSeconds: 1, TopologyKey: "example.com/rack"}},
		{name: "unknown field", args: "      timeout: 5\n", wantErr: `unknown field "timeout"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := loadPluginArgs(t, header+tt.args, "GPUGang")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := args.(*config.GPUGangArgs)
			if got == nil || got.ScheduleTimeoutSeconds != tt.want.ScheduleTimeoutSeconds || got.BackoffSeconds != tt.want.BackoffSeconds || got.TopologyKey != tt.want.TopologyKey {
				t.Fatalf("args %+v, want %+v", got, tt.want)
			}
		})
	}
}
