package v1

import (
	"reflect"
	"testing"
)

func TestSetDefaultsGPUGangArgs(t *testing.T) {
	tests := []struct {
		name string
		in   GPUGangArgs
		want GPUGangArgs
	}{
		{
			name: "empty",
			in:   GPUGangArgs{},
			want: GPUGangArgs{ScheduleTimeoutSeconds: ptr(60), BackoffSeconds: ptr(10)},
		},
		{
			name: "set values are kept, whatever their value",
			in:   GPUGangArgs{ScheduleTimeoutSeconds: ptr(5), BackoffSeconds: ptr(0), TopologyKey: "example.com/rack"},
			want: GPUGangArgs{ScheduleTimeoutSeconds: ptr(5), BackoffSeconds: ptr(0), TopologyKey: "example.com/rack"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.DeepCopyObject().(*GPUGangArgs)
			SetDefaults_GPUGangArgs(got)
			if !reflect.DeepEqual(got, &tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
