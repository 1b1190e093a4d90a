package trace

import (
	"strings"
	"testing"
)

// TestLoadTelemetryErrors: a malformed telemetry file is an error naming
// the file, the line and column, the value and what is allowed.
func TestLoadTelemetryErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "empty file: want a header row with columns time,node,gpu,signal,value"},
		{"missing column", "time,node,gpu,value\n", `lacks column "signal"`},
		{"header only", "time,node,gpu,signal,value\n", "no samples"},
		{"bad time", "time,node,gpu,signal,value\n-1,n0,0,DCGM_FI_DEV_GPU_UTIL,5\n", `:2:1: time "-1": want an integer`},
		{"bad gpu", "time,node,gpu,signal,value\n0,n0,first,DCGM_FI_DEV_GPU_UTIL,5\n", `:2:6: gpu "first": want the GPU's index`},
		{"unknown signal", "time,node,gpu,signal,value\n0,n0,0,GPU_UTIL,5\n", `:2:8: signal "GPU_UTIL": want one of DCGM_FI_DEV_GPU_UTIL,`},
		{"NaN", "time,node,gpu,signal,value\n0,n0,GPU-a,DCGM_FI_DEV_GPU_UTIL,NaN\n", `:2:33: value "NaN": want a finite number`},
		{"short row", "time,node,gpu,signal,value\n0,n0,0\n", ":2:1: 3 fields: want 5"},
		{"no node", "time,node,gpu,signal,value\n0,,0,DCGM_FI_DEV_GPU_UTIL,5\n", `node "": want a node name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadTelemetry(writeFile(t, "telemetry.csv", tt.content))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "telemetry.csv") {
				t.Errorf("error %v, want one naming the file and containing %q", err, tt.want)
			}
		})
	}
}
