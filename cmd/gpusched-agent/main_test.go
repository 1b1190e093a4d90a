package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestAgentFlagsRefused: bad settings stop the agent before it touches NVML,
// the runtime or the API server, with an error naming the setting.
func TestAgentFlagsRefused(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no node name", []string{"--node-name="}, "node name is empty"},
		{"unknown mode", []string{"--node-name=n", "--mode=docker"}, `mode "docker": want "cdi" or "env"`},
		{"relative MPS directory", []string{"--node-name=n", "--mps-pipe-dir=tmp/mps"}, `MPS pipe directory "tmp/mps": want an absolute path`},
		{"bad XID list", []string{"--node-name=n", "--critical-xids=79,abc"}, `--critical-xids: critical XID "abc"`},
		{"namespace exemption", []string{"--node-name=n", "--unrestricted-namespaces=gpu-operator"}, "--unrestricted-namespaces=gpu-operator: no longer accepted"},
		{"unknown mock machine", []string{"--node-name=n", "--nvml-mock=dgx1"}, `--nvml-mock "dgx1": want dgxa100 or dgxh100`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newCommand(context.Background())
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
