package simulator

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// simulateProcessEnv, set in a test binary's environment, makes the binary
// run `gpusched simulate` with its arguments instead of the tests, so that
// tests can start shards as separate processes without building
// cmd/gpusched.
const simulateProcessEnv = "GPUSCHED_TEST_SIMULATE_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(simulateProcessEnv) == "1" {
		cmd := NewCommand()
		cmd.SetArgs(os.Args[1:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// simulateProcess runs `gpusched simulate args...` as a separate process
// with env added to its environment, and returns its stdout, stderr and
// exit error.
func simulateProcess(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), simulateProcessEnv+"=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// writeSweepInputs writes a small cluster (16 nodes of the synthetic
// cluster) and two pod lists of 60 pods each from the synthetic workload of
// two seeds, at most 2 GPUs a pod, and returns the node file and the --pods
// value.
func writeSweepInputs(t *testing.T, dir string) (nodes, pods string) {
	t.Helper()
	cluster, _ := trace.Synthetic(trace.SyntheticOptions{Nodes: 16})
	var n strings.Builder
	n.WriteString("sn,cpu_milli,memory_mib,gpu,model\n")
	for _, node := range cluster {
		a := node.Status.Allocatable
		gpus := a.Name(gpu.ResourceGPU, resource.DecimalSI).Value()
		fmt.Fprintf(&n, "%s,%d,%d,%d,%s\n", node.Name, a.Cpu().MilliValue(), a.Memory().Value()>>20, gpus, node.Labels[gpu.LabelProduct])
	}
	nodes = filepath.Join(dir, "nodes.csv")
	mustWrite(t, nodes, n.String())
	var lists []string
	for seed := range uint64(2) {
		_, workload := trace.Synthetic(trace.SyntheticOptions{Nodes: 16, Seed: seed + 1})
		var p strings.Builder
		p.WriteString("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
		for i, tp := range workload[:60] {
			d, err := gpu.DemandFromPod(tp.Pod)
			if err != nil {
				t.Fatal(err)
			}
			requests := tp.Pod.Spec.Containers[0].Resources.Requests
			fmt.Fprintf(&p, "pod-%03d,%d,%d,%d,%d\n", i, requests.Cpu().MilliValue(), requests.Memory().Value()>>20, min(d.Count, 2), d.Milli)
		}
		path := filepath.Join(dir, fmt.Sprintf("pods-%d.csv", seed))
		mustWrite(t, path, p.String())
		lists = append(lists, path)
	}
	return nodes, strings.Join(lists, ",")
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestParseShard: --shard I/N and --shards N with the Job's index, and each
// bad value named with what is allowed.
func TestParseShard(t *testing.T) {
	tests := []struct {
		name   string
		shard  string
		shards int
		env    string
		want   report.Shard
		ok     bool
		errHas string
	}{
		{name: "whole sweep", ok: false},
		{name: "--shard", shard: "2/5", want: report.Shard{Index: 2, Count: 5}, ok: true},
		{name: "--shard spaces", shard: " 0 / 1 ", want: report.Shard{Index: 0, Count: 1}, ok: true},
		{name: "--shards from the Job", shards: 8, env: "7", want: report.Shard{Index: 7, Count: 8}, ok: true},
		{name: "both", shard: "1/2", shards: 2, errHas: "--shard 1/2 and --shards 2: give one"},
		{name: "index past count", shard: "5/5", errHas: `--shard "5/5": want I/N, shard I of N with 0 ≤ I < N`},
		{name: "negative", shard: "-1/4", errHas: `--shard "-1/4": want I/N`},
		{name: "no slash", shard: "3", errHas: `--shard "3": want I/N`},
		{name: "zero shards", shard: "0/0", errHas: `--shard "0/0": want I/N`},
		{name: "too many", shards: report.MaxShards + 1, env: "0", errHas: "--shards 100001: want a number of shards in 1..100000"},
		{name: "negative shards", shards: -2, env: "0", errHas: "--shards -2: want a number of shards in 1..100000"},
		{name: "no index", shards: 4, errHas: "--shards 4: the shard's index comes from JOB_COMPLETION_INDEX, which is not set"},
		{name: "index out of range", shards: 4, env: "4", errHas: `JOB_COMPLETION_INDEX "4": want an integer in 0..3 (--shards 4)`},
		{name: "index not a number", shards: 4, env: "two", errHas: `JOB_COMPLETION_INDEX "two": want an integer in 0..3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == report.ShardIndexEnv {
					return tt.env
				}
				return ""
			}
			got, ok, err := parseShard(tt.shard, tt.shards, getenv)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Errorf("error = %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil || ok != tt.ok || got != tt.want {
				t.Errorf("parseShard = %v, %v, %v; want %v, %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
}

// TestShardFlags: the flags that do not go together are refused before
// anything runs, each naming the flags.
func TestShardFlags(t *testing.T) {
	tests := []struct {
		name string
		f    flags
		want string
	}{
		{"shard without out", flags{shard: "0/2"}, "--shard 0/2 needs --out DIR"},
		{"out without shard", flags{out: "results"}, "--out results needs --shard I/N or --shards N"},
		{"shard with json", flags{shard: "0/2", out: "r", jsonOut: "a.json"}, `--shard 0/2 writes its runs to --out only: merge the shards with "gpusched simulate merge"`},
		{"bad shard", flags{shard: "2/2", out: "r"}, `--shard "2/2": want I/N`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.arrival, tt.f.seeds = "fgd", "1"
			err := runCommand(context.Background(), tt.f, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestPodListNames: --pods names each workload after its file, and two
// lists of the same name are refused.
func TestPodListNames(t *testing.T) {
	if got, err := splitPodLists("a/openb_pod_list_default.csv, b/x.yaml"); err != nil || len(got) != 2 || report.WorkloadName(got[0]) != "openb_pod_list_default" || report.WorkloadName(got[1]) != "x" {
		t.Errorf("splitPodLists = %v, %v", got, err)
	}
	if _, err := splitPodLists("a/p.csv,b/p.csv"); err == nil || !strings.Contains(err.Error(), `a/p.csv and b/p.csv are both named "p"`) {
		t.Errorf("error = %v, want both files named", err)
	}
	if _, err := splitPodLists("a.csv,,b.csv"); err == nil || !strings.Contains(err.Error(), "none empty") {
		t.Errorf("error = %v, want the empty entry refused", err)
	}
}
