package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

const rackLabel = "topology.kubernetes.io/rack"

// gangConfig is examples/gpusched-gang-config.yaml with the short timeouts
// the tests need: a gang waits 3 s for its pods, a released gang 1 s.
func gangConfig(t *testing.T) string {
	cfg := exampleGangConfig(t)
	return replaceOnce(t, replaceOnce(t, cfg, "scheduleTimeoutSeconds: 60", "scheduleTimeoutSeconds: 3"), "backoffSeconds: 10", "backoffSeconds: 1")
}

func exampleGangConfig(t *testing.T) string {
	return string(readRepoFile(t, "examples", "gpusched-gang-config.yaml"))
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q is not in the configuration exactly once", old)
	}
	return strings.Replace(s, old, new, 1)
}

// startGangSched runs gpusched with both plugins and config.
func startGangSched(ctx context.Context, t *testing.T, c *testcluster.Cluster, config string) *testcluster.Scheduler {
	return c.StartScheduler(ctx, t, config,
		plugins.CommandOptions()...)
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installPodGroupCRD applies deploy/crds' PodGroup CRD and waits until it is
// Established and PodGroups can be listed.
func installPodGroupCRD(ctx context.Context, t *testing.T, c *testcluster.Cluster) dynamic.Interface {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(c.RestConfig)
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(readRepoFile(t, "deploy", "crds", "scheduling.x-k8s.io_podgroups.yaml"), &crd.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the PodGroup CRD: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, cond := range conditions {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		_, err = dyn.Resource(podgroup.Resource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("PodGroup CRD not established: %v", err)
	}
	return dyn
}

// createPodGroup creates a PodGroup in "default"; timeoutSeconds 0 leaves
// spec.scheduleTimeoutSeconds unset.
func createPodGroup(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, minMember, timeoutSeconds int) {
	t.Helper()
	spec := map[string]any{"minMember": int64(minMember)}
	if timeoutSeconds > 0 {
		spec["scheduleTimeoutSeconds"] = int64(timeoutSeconds)
	}
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": podgroup.Group + "/" + podgroup.Version, "kind": podgroup.Kind,
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	}}
	if _, err := dyn.Resource(podgroup.Resource).Namespace("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodGroup %s: %v", name, err)
	}
}

// getPodGroup reads a PodGroup.
func getPodGroup(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) *podgroup.PodGroup {
	t.Helper()
	u, err := dyn.Resource(podgroup.Resource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pg, err := podgroup.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// waitForPodGroupStatus polls until the PodGroup's status satisfies ok.
func waitForPodGroupStatus(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, what string, ok func(podgroup.Status) bool) {
	t.Helper()
	var last podgroup.Status
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		last = getPodGroup(ctx, t, dyn, name).Status
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("PodGroup %s: status never %s; last %+v", name, what, last)
	}
}

// gangPod is a pod of gang group asking for gpus whole GPUs; group "" makes
// a pod outside any gang.
func gangPod(name, group string, gpus int) *v1.Pod {
	pod := gt.MakeGPUPod(name).GPUs(gpus).Obj()
	if group == "" {
		return pod
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[podgroup.LabelPodGroup] = group
	return pod
}

// waitForPodGroupEvent waits for an event with reason on the PodGroup and
// returns its message.
func waitForPodGroupEvent(ctx context.Context, t *testing.T, c *testcluster.Cluster, name, reason string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.Regarding.Kind == podgroup.Kind && ev.Regarding.Name == name && ev.Reason == reason {
				msg = ev.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on PodGroup %s", reason, name)
	}
	return msg
}

// boundPods returns the bound pods of "default" by name.
func boundPods(ctx context.Context, c *testcluster.Cluster) (map[string]*v1.Pod, error) {
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]*v1.Pod{}
	for i := range list.Items {
		if list.Items[i].Spec.NodeName != "" {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// gpuOverlap returns a description of the first GPU that the pods' assignments
// allocate beyond its capacity, or "".
func gpuOverlap(pods map[string]*v1.Pod) string {
	used := map[string]int64{}
	for _, pod := range pods {
		a, ok := gpu.AssignmentOf(pod)
		if !ok {
			continue
		}
		for _, d := range a.Devices {
			key := fmt.Sprintf("%s/%d", a.Node, d)
			used[key] += a.Milli
			if used[key] > gpu.MilliPerGPU {
				return fmt.Sprintf("GPU %s allocated %d milli-GPU (pod %s among others)", key, used[key], pod.Name)
			}
		}
	}
	return ""
}

// deletePods deletes pods at once, as if they had finished.
func deletePods(ctx context.Context, t *testing.T, c *testcluster.Cluster, names ...string) {
	t.Helper()
	zero := int64(0)
	for _, name := range names {
		err := c.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting pod %s: %v", name, err)
		}
	}
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, d, true, func(context.Context) (bool, error) { return cond(), nil })
	return err == nil
}
