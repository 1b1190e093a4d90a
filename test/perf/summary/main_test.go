package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := `goos: linux
BenchmarkPerfScheduling/DefaultProfilePlainPods/500Nodes-2   	       1	         8.822 SchedulingDuration/Duration	       246.3 SchedulingThroughput/Average	       141.9 heap_memory_usage/Max
--- BENCH: BenchmarkPerfScheduling/DefaultProfilePlainPods/500Nodes-2
BenchmarkPerfScheduling/GPUSchedSharePods/500Nodes-2   	       1	         9.1 SchedulingDuration/Duration	       230.5 SchedulingThroughput/Average	       150.0 heap_memory_usage/Max
`
	runs, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if got := runs["500Nodes"]["DefaultProfilePlainPods"]["SchedulingThroughput/Average"]; got != 246.3 {
		t.Errorf("reference throughput = %v, want 246.3", got)
	}
	if got := runs["500Nodes"]["GPUSchedSharePods"]["heap_memory_usage/Max"]; got != 150 {
		t.Errorf("share heap = %v, want 150", got)
	}
	if len(runs) != 1 || len(runs["500Nodes"]) != 2 {
		t.Errorf("runs = %v", runs)
	}
	if got := ratio(230.5, 246.3); got != "0.94" {
		t.Errorf("ratio = %s, want 0.94", got)
	}
}
