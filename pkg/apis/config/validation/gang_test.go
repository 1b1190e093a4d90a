package validation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

func TestValidateGPUGangArgs(t *testing.T) {
	valid := config.GPUGangArgs{ScheduleTimeoutSeconds: 60, BackoffSeconds: 10, TopologyKey: "topology.kubernetes.io/rack"}
	tests := []struct {
		name   string
		modify func(*config.GPUGangArgs)
		want   []string
	}{
		{name: "valid", modify: func(*config.GPUGangArgs) {}},
		{name: "no topology key", modify: func(a *config.GPUGangArgs) { a.TopologyKey = "" }},
		{name: "zero timeout", modify: func(a *config.GPUGangArgs) { a.ScheduleTimeoutSeconds = 0 },
			want: []string{"args.scheduleTimeoutSeconds: Invalid value: 0: must be from 1 to 900"}},
		{name: "timeout beyond the framework's limit", modify: func(a *config.GPUGangArgs) { a.ScheduleTimeoutSeconds = 901 },
			want: []string{"args.scheduleTimeoutSeconds: Invalid value: 901: must be from 1 to 900"}},
		{name: "no back-off", modify: func(a *config.GPUGangArgs) { a.BackoffSeconds = 0 },
			want: []string{"args.backoffSeconds: Invalid value: 0: must be from 1 to 600"}},
		{name: "a topology key that is no label", modify: func(a *config.GPUGangArgs) { a.TopologyKey = "rack id" },
			want: []string{`args.topologyKey: Invalid value: "rack id"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := valid
			tt.modify(&args)
			errs := ValidateGPUGangArgs(field.NewPath("args"), &args)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %d", errs, len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %q, want it to contain %q", errs[i].Error(), want)
				}
			}
		})
	}
}
