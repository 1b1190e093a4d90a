package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/pkg/dashboard"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDashboardCommand runs `gpusched dashboard --kubeconfig <file>
// --listen 127.0.0.1:0` as a process against a real API server: it prints
// where it serves, /api/snapshot shows the cluster's GPU node and its
// pending GPU pod, /metrics its 8 GPUs, and SIGTERM ends it with status 0.
func TestDashboardCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD("NVIDIA-A100-SXM4-80GB", 8, 81920).Obj())
	pod := gt.MakeGPUPod("waits").SchedulerName("gpusched").GPUs(2).Obj()
	pod.UID = ""
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "dashboard", "--kubeconfig", c.KubeconfigPath, "--listen", "127.0.0.1:0", "--scheduler-name", "gpusched")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var output lockedBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("gpusched dashboard after SIGTERM: %v\n%s", err, output.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("gpusched dashboard did not exit on SIGTERM\n%s", output.String())
		}
	}()

	addrRE := regexp.MustCompile(`Serving the GPU dashboard on (http://127\.0\.0\.1:\d+/)`)
	var base string
	var snap dashboard.Wire
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, err
		default:
		}
		if base == "" {
			m := addrRE.FindStringSubmatch(output.String())
			if m == nil {
				return false, nil
			}
			base = m[1]
		}
		resp, err := http.Get(base + "api/snapshot")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&snap) != nil {
			return false, nil
		}
		return snap.Cluster.Nodes == 1 && len(snap.Pending) == 1, nil
	})
	if err != nil {
		t.Fatalf("the dashboard never showed the node and the pending pod: %v; last %+v\n%s", err, snap, output.String())
	}
	if p := snap.Pending[0]; p.Name != "waits" || p.Demand != "2 GPUs" || p.Class != dashboard.ClassWaiting {
		t.Errorf("pending pod %+v, want waits asking 2 GPUs, not yet tried", p)
	}
	resp, err := http.Get(base + "metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "\ngpusched_cluster_gpus 8\n") {
		t.Errorf("/metrics has no gpusched_cluster_gpus 8:\n%.3000s", body)
	}
}
