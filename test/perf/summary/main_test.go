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
BenchmarkPerfScheduling/GPUSchedSharePods/500Nodes-2   	       1
BenchmarkPerfScheduling/DefaultProfilePlainPods/500Nodes-2   	       1	         8.0 SchedulingDuration/Duration	       253.7 SchedulingThroughput/Average	       140.1 heap_memory_usage/Max
`
	runs, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	// Two runs of the reference: the mean, (246.3 + 253.7) / 2.
	if got := runs["500Nodes"]["DefaultProfilePlainPods"]["SchedulingThroughput/Average"]; got != 250 {
		t.Errorf("reference throughput = %v, want 250", got)
	}
	// A line without metrics does not count as a run.
	if got := runs["500Nodes"]["GPUSchedSharePods"]["heap_memory_usage/Max"]; got != 150 {
		t.Errorf("share heap = %v, want 150", got)
	}
	if len(runs) != 1 || len(runs["500Nodes"]) != 2 {
		t.Errorf("runs = %v", runs)
	}
	cases := map[string]result{"DefaultProfilePlainPods": {}, "GPUSchedSharePods": {}, "DefaultProfileDRAClaimTemplates": {}, "GPUSchedDRAClaimTemplates": {}}
	for c, want := range map[string]string{
		"GPUSchedDRAClaimTemplates":       "DefaultProfileDRAClaimTemplates", // its own workload under the default profile
		"GPUSchedSharePods":               "DefaultProfilePlainPods",         // no DefaultProfileSharePods in the run
		"DefaultProfileDRAClaimTemplates": "DefaultProfilePlainPods",
	} {
		if got := referenceOf(c, cases); got != want {
			t.Errorf("referenceOf(%s) = %s, want %s", c, got, want)
		}
	}
	if got := ratio(230.5, 246.3); got != "0.94" {
		t.Errorf("ratio = %s, want 0.94", got)
	}
}
