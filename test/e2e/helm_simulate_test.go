package e2e

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmChartSimulate renders charts/gpusched's sweep Job: absent by
// default; with simulate.enabled linted, applied with `kubectl apply
// --dry-run=server` and checked as deploy/simulate/job.yaml is
// (checkSweepJob), with its defaults and with every simulate value changed;
// and bad values refused naming the value.
func TestHelmChartSimulate(t *testing.T) {
	helm := findTool(t, "helm", "HELM", helmInstall)
	command(t, nil, helm, "lint", "--strict", "charts/gpusched", "--set=simulate.enabled=true")
	defaults := decodeObjects(t, command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system"))
	if slices.ContainsFunc(defaults, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Job" }) {
		t.Error("chart defaults: the sweep Job is rendered")
	}
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath

	enabled := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system", "--set=simulate.enabled=true")
	command(t, enabled, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	checkSweepJob(t, "simulate.enabled=true", decodeObjects(t, enabled), "gpusched-sweep", "gpusched-sweep-results", traceFiles(t))

	custom := command(t, nil, helm, "template", "team", "charts/gpusched", "--namespace=kube-system", "--set=simulate.enabled=true",
		"--set=simulate.shards=40", "--set=simulate.parallelism=10", "--set=simulate.backoffLimitPerIndex=1",
		"--set=simulate.pods={openb_pod_list_cpu050.csv,openb_pod_list_multigpu20.csv}", "--set=simulate.policies={FGD,FragFit}",
		"--set=simulate.seeds=1\\,5\\,9", "--set=simulate.resultsClaim=team-results", "--set=simulate.resultsDir=fgd/2024")
	command(t, custom, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs := decodeObjects(t, custom)
	out := checkSweepJob(t, "custom simulate values", objs, "team-gpusched-sweep", "team-results", traceFiles(t))
	var job batchv1.Job
	findObject(t, objs, "Job", "team-gpusched-sweep", &job)
	args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--pods=/traces/openb_pod_list_cpu050.csv,/traces/openb_pod_list_multigpu20.csv", "--policies=FGD,FragFit", "--seeds=1,5,9", "--shards=40"} {
		if !strings.Contains(args, want) {
			t.Errorf("custom simulate values: args %s lack %s", args, want)
		}
	}
	if *job.Spec.Parallelism != 10 || *job.Spec.BackoffLimitPerIndex != 1 || out != "/results/fgd/2024" {
		t.Errorf("custom simulate values: parallelism %d, backoffLimitPerIndex %d, --out %s", *job.Spec.Parallelism, *job.Spec.BackoffLimitPerIndex, out)
	}

	for _, bad := range []struct{ set, want string }{
		{"simulate.enabled=yes", "/simulate/enabled"},
		{"simulate.shards=0", "/simulate/shards"},
		{"simulate.seeds=42-51", "/simulate/seeds"},
		{"simulate.pods={/etc/passwd}", "/simulate/pods/0"},
		{"simulate.nodes=a b.csv", "/simulate/nodes"},
		{"simulate.policies={Best Fit}", "/simulate/policies/0"},
		{"simulate.arrival=poisson", "/simulate/arrival"},
		{"simulate.resultsDir=../up", "/simulate/resultsDir"},
		{"simulate.tracesClaim=Traces", "/simulate/tracesClaim"},
	} {
		_, err := tryCommand(nil, helm, "template", "gpusched", "charts/gpusched", "--set", bad.set)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: error %v, want one naming %s", bad.set, err, bad.want)
		}
	}
}
