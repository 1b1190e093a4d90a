//go:build perf

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpusched/gpusched/pkg/extender"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestThroughputExtenderVsPlugin schedules the same pods on the same nodes
// in one run, in plugin mode (gpusched with examples/gpusched-config.yaml)
// and in extender mode (the stock scheduler with
// deploy/extender/scheduler-config.yaml and the extender), and logs pods
// per second for each and their ratio. The pods wait in the queue before
// each scheduler starts; the clock runs from the scheduler being synced to
// the last pod bound. It runs with the production client limits, and with
// none. Run with:
//
//	go test -tags perf -run TestThroughputExtenderVsPlugin -v ./test/e2e/
func TestThroughputExtenderVsPlugin(t *testing.T) {
	const nodes, pods = 100, 500
	for _, tc := range []struct {
		name       string
		qps, burst int // the clients of the scheduler and the extender
	}{
		// The defaults: the scheduler's clientConnection and the extender's
		// --kube-api-qps and --kube-api-burst. Both modes are then bound by
		// API writes (a Binding and an event per pod).
		{"default client limits", 50, 100},
		// What the scheduling itself costs.
		{"unthrottled clients", 5000, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := testcluster.Start(t)
			for i := range nodes {
				testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(fmt.Sprintf("gpu-%03d", i)).GFD(a100, 8, 81920).Obj())
			}
			limits := fmt.Sprintf("  qps: %d\n  burst: %d\n", tc.qps, tc.burst)
			opts := extender.NewOptions()
			config := rest.CopyConfig(c.RestConfig)
			config.QPS, config.Burst = float32(tc.qps), tc.burst

			plugin := measure(ctx, t, c, pods, schedulerName, func() func() {
				s := c.StartScheduler(ctx, t, exampleConfig(t)+"clientConnection:\n"+limits, plugins.CommandOptions()...)
				return s.Stop
			})
			ext := measure(ctx, t, c, pods, "", func() func() {
				opts.BindAddress = freeLoopbackAddr(t)
				e := startExtenderAs(ctx, t, config, opts)
				cfg := strings.Replace(extenderConfig(t, opts.BindAddress, true), "clientConnection:\n", "clientConnection:\n"+limits, 1)
				s := c.StartScheduler(ctx, t, cfg)
				return func() {
					t.Logf("extender binds: %s", bindCounts(t, opts.BindAddress))
					s.Stop()
					_ = e.Stop()
				}
			})
			t.Logf("%s: %d pods (half 1 whole GPU, half 250 milli-GPU shares) on %d 8-GPU nodes: plugin mode %.1f pods/s, extender mode %.1f pods/s, ratio %.2f",
				tc.name, pods, nodes, plugin, ext, ext/plugin)
		})
	}
}

// measure creates the pods for schedulerName ("" for the default
// scheduler), starts a scheduler with start, and returns pods per second
// until all are bound; then it stops the scheduler and deletes the pods.
func measure(ctx context.Context, t *testing.T, c *testcluster.Cluster, pods int, schedulerName string, start func() (stop func())) float64 {
	t.Helper()
	client := fastClient(t, c)
	for i := range pods {
		w := gt.MakeGPUPod(fmt.Sprintf("perf-%04d", i))
		if i%2 == 0 {
			w.GPUs(1)
		} else {
			w.Milli(250)
		}
		pod := w.Obj()
		pod.UID = ""
		pod.Spec.SchedulerName = schedulerName
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := start()
	began := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			if list.Items[i].Spec.NodeName == "" {
				return false, nil
			}
		}
		return len(list.Items) == pods, nil
	})
	took := time.Since(began)
	if err != nil {
		t.Fatalf("pods not all bound: %v", err)
	}
	assertNoGPUGivenTwice(ctx, t, c)
	stop()
	zero := int64(0)
	if err := client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("pods not deleted")
	}
	return float64(pods) / took.Seconds()
}

// fastClient is an admin client that creates test pods without client-side
// rate limits.
func fastClient(t *testing.T, c *testcluster.Cluster) kubernetes.Interface {
	config := rest.CopyConfig(c.RestConfig)
	config.QPS, config.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// bindCounts returns the extender's binds metric.
func bindCounts(t *testing.T, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "gpusched_extender_binds_total{") {
			out = append(out, strings.TrimPrefix(line, "gpusched_extender_binds_total"))
		}
	}
	return strings.Join(out, " ")
}
