package e2e

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmChartDefragmenter renders charts/gpusched's defragmenter: absent
// by default; with defragmenter.enabled linted and applied with `kubectl
// apply --dry-run=server`, its Deployment running `gpusched defragment`
// with the chart's scheduler name and policy and the values given, its
// RBAC applied for real and checked as deploy/defragmenter's is; and bad
// values refused naming the value.
func TestHelmChartDefragmenter(t *testing.T) {
	helm := findTool(t, "helm", "HELM", helmInstall)
	command(t, nil, helm, "lint", "--strict", "charts/gpusched", "--set=defragmenter.enabled=true")
	defaults := decodeObjects(t, command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system"))
	if slices.ContainsFunc(defaults, func(o *unstructured.Unstructured) bool { return strings.Contains(o.GetName(), "defragmenter") }) {
		t.Error("chart defaults: the defragmenter is rendered")
	}
	c, kubectl := rbacCluster(t)
	kc := "--kubeconfig=" + c.KubeconfigPath

	custom := command(t, nil, helm, "template", "gpusched", "charts/gpusched", "--namespace=kube-system",
		"--set=defragmenter.enabled=true", "--set=defragmenter.mode=Enforce", "--set=schedulerName=gpu",
		"--set=plugin.scoringStrategy.type=FragFit", "--set=defragmenter.selector=team=research",
		"--set=defragmenter.movesPerHour=30", "--set=defragmenter.planTimeout=10m")
	command(t, custom, kubectl, kc, "apply", "--dry-run=server", "-f", "-")
	objs := decodeObjects(t, custom)
	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "gpusched-defragmenter", &d)
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"defragment", "--mode=Enforce", "--scheduler-name=gpu", "--policy=FragFit", "--selector=team=research",
		"--moves-per-hour=30", "--plan-timeout=10m", "--lease-name=gpusched-defragmenter"} {
		if !strings.Contains(args, want) {
			t.Errorf("defragmenter args %s lack %s", args, want)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != "gpusched-defragmenter" {
		t.Errorf("ServiceAccount %q", d.Spec.Template.Spec.ServiceAccountName)
	}

	// Rendered as release "gpusched" in kube-system, the chart's admission
	// policies are deploy/defragmenter's (which TestDefragmenterNodePolicy
	// attacks), the same identity included.
	deployed := decodeObjects(t, readRepoFile(t, "deploy", "defragmenter", "admission.yaml"))
	for _, pair := range [][2]string{{"gpusched-defragmenter-nodes", "gpusched-defragmenter-nodes"}, {"gpusched-reservations", "gpusched-defragmenter-reservations"}} {
		var want, got admissionv1.ValidatingAdmissionPolicy
		findObject(t, deployed, "ValidatingAdmissionPolicy", pair[0], &want)
		findObject(t, objs, "ValidatingAdmissionPolicy", pair[1], &got)
		if !reflect.DeepEqual(want.Spec, got.Spec) {
			t.Errorf("the chart's %s differs from deploy/defragmenter's %s:\n%+v\n%+v", pair[1], pair[0], got.Spec, want.Spec)
		}
	}
	command(t, rbacOnly(t, objs), kubectl, kc, "apply", "-f", "-")
	assertAccess(t, kubectl, kc, "system:serviceaccount:kube-system:gpusched-defragmenter", []access{
		{"update", "nodes", "", ""}, {"create", "pods", "eviction", "default"}, {"list", "poddisruptionbudgets.policy", "", ""},
		{"list", "podgroups.scheduling.x-k8s.io", "", ""}, {"list", "events", "", ""},
		{"update", "leases.coordination.k8s.io/gpusched-defragmenter", "", "kube-system"},
	}, []access{{"delete", "pods", "", "default"}, {"patch", "pods", "", "default"}, {"update", "nodes", "status", ""}})

	for _, bad := range []struct{ set, want string }{
		{"defragmenter.mode=Bogus", "/defragmenter/mode"},
		{"defragmenter.movesPerHour=0", "/defragmenter/movesPerHour"},
		{"defragmenter.interval=soon", "/defragmenter/interval"},
		{"defragmenter.selector=a;b", "/defragmenter/selector"},
	} {
		_, err := tryCommand(nil, helm, "template", "gpusched", "charts/gpusched", "--set=defragmenter.enabled=true", "--set", bad.set)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: error %v, want one naming %s", bad.set, err, bad.want)
		}
	}
}
