package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestDefragmentCommand runs `gpusched defragment` as a process, as the
// documentation shows it, against a real API server. Node a (2 A100s)
// holds two opted-in shares of 600 milli-GPU of one ReplicaSet, one per
// GPU; node b (2 A100s) a bare share of 600 on GPU 0; node c (1 A100) is
// empty. A pending 2-GPU pod the scheduler found unschedulable fits
// nowhere; moving a's two shares (to b's GPU 1 and c's GPU 0, the only
// GPUs with 600 free) makes room on a. In DryRun, with leader election,
// the command records that plan on the pod, counts it in its metrics,
// changes nothing, and on SIGTERM releases its Lease and exits 0. Bad
// flags are refused naming the flag, the value and what is allowed.
func TestDefragmentCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testcluster.Start(t)
	for name, count := range map[string]int{"a": 2, "b": 2, "c": 1} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).GFD("NVIDIA-A100-SXM4-80GB", count, 81920).Obj())
	}
	create := func(pod *v1.Pod) {
		t.Helper()
		pod.UID = ""
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []int{0, 1} {
		create(gt.MakeGPUPod(fmt.Sprintf("infer-%d", g)).Milli(600).Node("a").Assigned(gpu.Assignment{Node: "a", Devices: []int{g}, Milli: 600}).
			OwnedBy("ReplicaSet", "infer", "rs-uid").Annotation(defrag.AnnotationMovable, "true").Obj())
	}
	create(gt.MakeGPUPod("bare").Milli(600).Node("b").Assigned(gpu.Assignment{Node: "b", Devices: []int{0}, Milli: 600}).Obj())
	pending := gt.MakeGPUPod("trainer").SchedulerName("gpusched").GPUs(2).Obj()
	pending.UID = ""
	created, err := c.Client.CoreV1().Pods("default").Create(ctx, pending, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: 2 insufficient free GPUs."}}
	if _, err := c.Client.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct{ flag, want, also string }{
		{"--mode=Sometimes", `Sometimes`, `want DryRun or Enforce`},
		{"--policy=Tetris", `--policy: unknown policy`, `Tetris`},
		{"--moves-per-hour=0", "--moves-per-hour 0: want at least 1", ""},
		{"--plan-timeout=-1s", "--plan-timeout -1s: want a positive duration", ""},
		{"--selector=a in (", `--selector`, `unable to parse requirement`},
	} {
		// klog quotes the error: its own quotes come escaped.
		out, err := runDefragment(ctx, "--kubeconfig", c.KubeconfigPath, bad.flag).CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.want) || !strings.Contains(string(out), bad.also) {
			t.Errorf("%s: %v, output %q; want a failure saying %q and %q", bad.flag, err, out, bad.want, bad.also)
		}
	}

	addr := freeLoopbackAddress(t)
	cmd := runDefragment(ctx, "--kubeconfig", c.KubeconfigPath, "--interval=1s", "--metrics-listen="+addr, "--lease-namespace=default")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var msg string
	err = wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, err
		default:
		}
		events, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == "trainer" && ev.Reason == "WouldMakeRoom" {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no WouldMakeRoom event: %v\n%s", err, output.String())
	}
	for _, want := range []string{"DryRun: moving 2 pod(s) makes room for default/trainer on node a GPUs 0,1:", "to b GPUs 1 (600 milli-GPU)", "to c GPUs 0 (600 milli-GPU)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("WouldMakeRoom %q lacks %q", msg, want)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpusched_defrag_plans_total{mode="DryRun",result="planned"} 1`, `gpusched_defrag_moves_total{mode="DryRun"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	lease, err := c.Client.CoordinationV1().Leases("default").Get(ctx, "gpusched-defragmenter", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the leader Lease is not held: %v", err)
	}
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 4 || slices.ContainsFunc(pods.Items, func(p v1.Pod) bool { return p.DeletionTimestamp != nil }) {
		t.Errorf("DryRun changed the pods: %d (%v)", len(pods.Items), err)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, output.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 30s after SIGTERM\n%s", output.String())
	}
	lease, err = c.Client.CoordinationV1().Leases("default").Get(ctx, "gpusched-defragmenter", metav1.GetOptions{})
	if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("the Lease is still held by %s after SIGTERM", *lease.Spec.HolderIdentity)
	}
}

// runDefragment is `gpusched defragment args...` as a process.
func runDefragment(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"defragment"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "KUBECONFIG=")
	return cmd
}

// freeLoopbackAddress is a loopback address with a port free a moment ago.
func freeLoopbackAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
