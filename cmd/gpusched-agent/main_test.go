package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
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

// TestInventory: `gpusched-agent inventory` on go-nvml's DGX H100 mock prints
// the annotation the agent publishes, which the scheduler reads back as the
// machine's eight GPUs, and one row per GPU with its device node.
func TestInventory(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out strings.Builder
		cmd := newCommand(context.Background())
		cmd.SetArgs(append([]string{"inventory", "--nvml-mock=dgxh100"}, args...))
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		return out.String(), err
	}

	raw, err := run("-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var report inventoryReport
	if err := json.Unmarshal([]byte(raw), &report); err != nil {
		t.Fatalf("inventory -o json is not JSON: %v\n%s", err, raw)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpu.AnnotationDevices: report.Annotation}}}
	inv, err := gpu.InventoryFromNode(node)
	if err != nil {
		t.Fatalf("the scheduler cannot read the printed annotation: %v", err)
	}
	if report.Unwatched == nil || len(report.Unwatched) != 0 {
		t.Errorf("unwatched GPUs %v, want an empty map: the mock's GPUs all report XID events", report.Unwatched)
	}
	if inv.Len() != 8 || len(report.GPUs) != 8 {
		t.Fatalf("%d devices in the annotation and %d GPUs, want the mock's 8 and 8", inv.Len(), len(report.GPUs))
	}
	for i, g := range report.GPUs {
		if d := inv.Devices[i]; d.UUID != g.UUID || d.Index != g.StableIndex() || d.Model != g.Model {
			t.Errorf("annotation device %d is %+v, want GPU %s at index %d of model %s", i, d, g.UUID, g.StableIndex(), g.Model)
		}
	}

	table, err := run()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	// The annotation line, a blank line, the header, 8 GPUs.
	if len(lines) != 11 || lines[0] != gpu.AnnotationDevices+": "+report.Annotation {
		t.Fatalf("table has %d lines, want 11 starting with the annotation:\n%s", len(lines), table)
	}
	for i, g := range report.GPUs {
		row := lines[3+i]
		if !strings.Contains(row, g.UUID) || !strings.Contains(row, fmt.Sprintf("/dev/nvidia%d", g.Minor)) || !strings.HasSuffix(row, "yes") {
			t.Errorf("row %q does not show GPU %s, /dev/nvidia%d and its XID events watched", row, g.UUID, g.Minor)
		}
	}

	if _, err := run("-o", "yaml"); err == nil || !strings.Contains(err.Error(), `--output "yaml": want table or json`) {
		t.Errorf("-o yaml: error %v, want one naming the allowed outputs", err)
	}
}
