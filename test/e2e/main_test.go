// Package e2e runs gpusched end to end: a real etcd and kube-apiserver
// in-process, the gpusched scheduler (the kube-scheduler command with the
// GPUPlacement plugin, configured by examples/gpusched-config.yaml) against
// them, and nodes that look like GPU nodes to the API (GFD labels and
// allocatable nvidia.com/gpu). No kubelet runs: a bound pod stays Pending,
// which is all the scheduler sees of a node anyway.
package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	h100 = "NVIDIA-H100-80GB-HBM3"
	t4   = "Tesla-T4"

	schedulerName = "gpusched"
	timeout       = 30 * time.Second
)

// exampleConfig is the configuration shipped in examples/, so the tests run
// what users run.
func exampleConfig(t *testing.T) string {
	return string(readRepoFile(t, "examples", "gpusched-config.yaml"))
}

// startGPUSched runs the gpusched scheduler in-process against the cluster,
// with the example configuration: GPUPlacement binds GPU pods itself.
func startGPUSched(ctx context.Context, t *testing.T, c *testcluster.Cluster) *testcluster.Scheduler {
	return c.StartScheduler(ctx, t, exampleConfig(t), plugins.CommandOptions()...)
}

// preBindConfig enables GPUPlacement without making it a binder: PreBind
// patches the assignment onto the pod and DefaultBinder binds it.
//
// Under DefaultBinder, GPUPlacement cannot tell a refused bind from one of
// unknown outcome, so every failed bind holds its GPUs for bindSettleAfter
// (docs/queueing.md); 2s here, where the tests refuse binds on purpose and
// no write outlives the API server's answer.
const preBindConfig = `
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: GPUPlacement
    args:
      bindSettleAfter: 2s
`

// startGPUSchedPreBind runs the gpusched scheduler with preBindConfig.
func startGPUSchedPreBind(ctx context.Context, t *testing.T, c *testcluster.Cluster) *testcluster.Scheduler {
	return c.StartScheduler(ctx, t, preBindConfig, plugins.CommandOptions()...)
}

// gpuNodes are the cluster's nodes: three GPU models and a CPU-only node.
func gpuNodes() []*v1.Node {
	return []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Clique("nvl-a").Obj(),
		gt.MakeGPUNode("h100-0").GFD(h100, 8, 81559).Obj(),
		gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("cpu-0").Obj(),
	}
}

func createPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod *v1.Pod) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.UID = ""
	pod.Spec.SchedulerName = schedulerName
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

// assignmentOf waits for the pod to be bound and returns its assignment,
// checking that the annotation names the node it is bound to.
func assignmentOf(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) gpu.Assignment {
	t.Helper()
	pod := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", name, timeout)
	a, err := gpu.ParseAssignment(pod.Annotations[gpu.AnnotationAssigned])
	if err != nil {
		t.Fatalf("pod %s bound to %s: %v", name, pod.Spec.NodeName, err)
	}
	if a.Node != pod.Spec.NodeName {
		t.Fatalf("pod %s bound to %s but assigned GPUs on %s", name, pod.Spec.NodeName, a.Node)
	}
	return a
}

// assertNoGPUGivenTwice sums the assignments of all bound pods per GPU and
// fails if any GPU is allocated beyond 1000 milli-GPU (overAllocated).
func assertNoGPUGivenTwice(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := overAllocated(pods.Items); v != "" {
		t.Error(v)
	}
}

// overAllocated describes the first GPU whose bound pods' assignments sum
// beyond one GPU, or "" when there is none.
func overAllocated(pods []v1.Pod) string {
	used := map[string]int64{}
	holders := map[string][]string{}
	for i := range pods {
		a, ok := gpu.AssignmentOf(&pods[i])
		if !ok {
			continue
		}
		for _, d := range a.Devices {
			key := fmt.Sprintf("%s GPU %d", a.Node, d)
			used[key] += a.Milli
			holders[key] = append(holders[key], pods[i].Name)
			if used[key] > gpu.MilliPerGPU {
				return fmt.Sprintf("%s allocated %d milli-GPU to %v", key, used[key], holders[key])
			}
		}
	}
	return ""
}

func containsAll(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s %q does not contain %q", what, s, p)
		}
	}
}
