package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpusched/gpusched/pkg/simulator"
)

// TestDeploySimulateJob applies deploy/simulate/ (the sweep's Indexed Job
// and its results volume, through the kustomization) and merge.yaml with
// `kubectl apply --dry-run=server`, then checks the sweep they describe:
// checkSweepJob on the Job, and merge.yaml reading the directory the shards
// write, from the same volume.
func TestDeploySimulateJob(t *testing.T) {
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath
	waitForNamespace(context.Background(), t, c, "default")
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "--namespace=default", "-k", "deploy/simulate")
	command(t, nil, kubectl, kc, "apply", "--dry-run=server", "--namespace=default", "-f", "deploy/simulate/merge.yaml")

	objs := decodeObjects(t, command(t, nil, kubectl, "kustomize", "deploy/simulate"))
	var claim v1.PersistentVolumeClaim
	findObject(t, objs, "PersistentVolumeClaim", "gpusched-sweep-results", &claim)
	if !slices.Contains(claim.Spec.AccessModes, v1.ReadWriteMany) {
		t.Errorf("results volume: access modes %v, want ReadWriteMany (the shards write from any node at once)", claim.Spec.AccessModes)
	}
	out := checkSweepJob(t, "deploy/simulate/job.yaml", objs, "gpusched-sweep", "gpusched-sweep-results", traceFiles(t))

	var merge batchv1.Job
	findObject(t, decodeObjects(t, readRepoFile(t, "deploy", "simulate", "merge.yaml")), "Job", "gpusched-sweep-merge", &merge)
	c0 := merge.Spec.Template.Spec.Containers[0]
	if len(c0.Args) < 3 || c0.Args[0] != "simulate" || c0.Args[1] != "merge" || c0.Args[2] != out {
		t.Errorf("merge.yaml: args %v, want simulate merge %s (the shards' --out)", c0.Args, out)
	}
	if v := volumeAt(merge.Spec.Template.Spec, c0, "/results"); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "gpusched-sweep-results" {
		t.Errorf("merge.yaml: /results is %+v, want the claim gpusched-sweep-results", v)
	}
}

// traceFiles is the names of the Alibaba trace's files in ../shared, or nil
// when the trace is not there.
func traceFiles(t *testing.T) []string {
	entries, err := os.ReadDir(filepath.Join(repoRoot(), "..", "shared", "traces", "alibaba-gpu-2023"))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// checkSweepJob checks the sweep Job named name among objs (what is the
// file or the chart's values being checked): an Indexed Job whose pods run
// `gpusched simulate` with flags the command accepts, as many shards as
// completions, a per-index backoff limit, restartPolicy Never, the traces
// read-only and the results on the claim named. When traces lists the
// trace's files, every file the sweep reads is among them. It returns the
// shards' --out directory.
func checkSweepJob(t *testing.T, what string, objs []*unstructured.Unstructured, name, resultsClaim string, traces []string) string {
	t.Helper()
	var job batchv1.Job
	findObject(t, objs, "Job", name, &job)
	spec, pod := job.Spec, job.Spec.Template.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("%s: completionMode %v, want Indexed: each pod's shard is its completion index", what, spec.CompletionMode)
	}
	if spec.BackoffLimitPerIndex == nil || *spec.BackoffLimitPerIndex < 1 {
		t.Errorf("%s: backoffLimitPerIndex %v, want one or more: a failed shard is retried alone", what, spec.BackoffLimitPerIndex)
	}
	if pod.RestartPolicy != v1.RestartPolicyNever {
		t.Errorf("%s: restartPolicy %s, want Never (a per-index backoff limit needs it)", what, pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(pod.Containers))
	}
	c := pod.Containers[0]

	// The arguments, with $(VAR) expanded as the kubelet expands them, parse
	// as `gpusched simulate` parses them.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		args = append(args, a)
	}
	if len(args) == 0 || args[0] != "simulate" {
		t.Fatalf("%s: args %v, want the simulate command", what, c.Args)
	}
	cmd := simulator.NewCommand()
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("%s: gpusched simulate refuses the args %v: %v", what, args[1:], err)
	}
	flag := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	if shards, _ := strconv.Atoi(flag("shards")); spec.Completions == nil || int32(shards) != *spec.Completions {
		t.Errorf("%s: --shards %s but completions %v: want them equal, one shard per index", what, flag("shards"), spec.Completions)
	}
	if _, err := simulator.ParseSeeds(flag("seeds")); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	out := flag("out")
	if !strings.HasPrefix(out, "/results/") && out != "/results" {
		t.Errorf("%s: --out %s, want a directory on the results volume (/results)", what, out)
	}
	if v := volumeAt(pod, c, "/results"); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != resultsClaim {
		t.Errorf("%s: /results is %+v, want the claim %s", what, v, resultsClaim)
	}
	readOnly := slices.ContainsFunc(c.VolumeMounts, func(m v1.VolumeMount) bool { return m.MountPath == "/traces" && m.ReadOnly })
	if v := volumeAt(pod, c, "/traces"); v == nil || !readOnly {
		t.Errorf("%s: the traces are not mounted read-only at /traces", what)
	}
	files := []string{flag("nodes")}
	for p := range strings.SplitSeq(flag("pods"), ",") {
		files = append(files, strings.TrimSpace(p))
	}
	for _, f := range files {
		if !strings.HasPrefix(f, "/traces/") {
			t.Errorf("%s: %s is not on the traces volume (/traces)", what, f)
		} else if traces != nil && !slices.Contains(traces, strings.TrimPrefix(f, "/traces/")) {
			t.Errorf("%s: %s is not a file of the Alibaba trace %v", what, f, traces)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the pods get an API token; the simulator calls no API", what)
	}
	t.Logf("%s: %d shards of the sweep %v", what, *spec.Completions, args[1:])
	return out
}

// volumeAt is the volume the container mounts at path, or nil.
func volumeAt(pod v1.PodSpec, c v1.Container, path string) *v1.Volume {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == m.Name {
				return &pod.Volumes[i]
			}
		}
	}
	return nil
}
