package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpusched/gpusched/pkg/extender"
	"github.com/gpusched/gpusched/test/testcluster"
)

// deployedURL is the urlPrefix of deploy/extender/scheduler-config.yaml,
// and deployedCertDir the directory of its tlsConfig's files.
const (
	deployedURL     = "https://gpusched-extender.kube-system.svc:8888"
	deployedCertDir = "/etc/kubernetes/gpusched-extender/"
)

// extenderConfig is the stock kube-scheduler's configuration for extender
// mode shipped in deploy/extender/scheduler-config.yaml, in its sidecar form
// (docs/extender.md, "As a sidecar"): the extender at http://addr on
// loopback, without TLS. The rest is what users run: the default profile
// with its default plugins and no gpusched plugin, and the extender for
// filter, prioritize, bind and preempt, without managedResources;
// nodeCacheCapable changes when false.
func extenderConfig(t *testing.T, addr string, nodeCacheCapable bool) string {
	t.Helper()
	config := string(readRepoFile(t, "deploy", "extender", "scheduler-config.yaml"))
	replace := func(old, new string) {
		if strings.Count(config, old) != 1 {
			t.Fatalf("scheduler-config.yaml: want exactly one %q", old)
		}
		config = strings.Replace(config, old, new, 1)
	}
	replace("urlPrefix: "+deployedURL, "urlPrefix: http://"+addr)
	replace("enableHTTPS: true", "enableHTTPS: false")
	start := strings.Index(config, "  tlsConfig:\n")
	end := strings.Index(config, "keyFile: "+deployedCertDir)
	if start < 0 || end < start {
		t.Fatal("scheduler-config.yaml: no tlsConfig ending in keyFile")
	}
	end += strings.Index(config[end:], "\n") + 1
	config = config[:start] + config[end:]
	if !nodeCacheCapable {
		replace("nodeCacheCapable: true", "nodeCacheCapable: false")
	}
	return config
}

// extenderTLSConfig is deploy/extender/scheduler-config.yaml as shipped, the
// extender reached at https://addr with the certificates of certDir
// (extender.WriteCertificates) in place of the host's.
func extenderTLSConfig(t *testing.T, addr, certDir string) string {
	t.Helper()
	config := string(readRepoFile(t, "deploy", "extender", "scheduler-config.yaml"))
	if strings.Count(config, deployedURL) != 1 || strings.Count(config, deployedCertDir) != 3 {
		t.Fatalf("scheduler-config.yaml: want one urlPrefix %s and three files in %s", deployedURL, deployedCertDir)
	}
	config = strings.Replace(config, deployedURL, "https://"+addr, 1)
	return strings.ReplaceAll(config, deployedCertDir, certDir+"/")
}

// readRepoFile reads a file of the repository.
func readRepoFile(t *testing.T, path ...string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(append([]string{filepath.Dir(file), "..", ".."}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// freeLoopbackAddr returns 127.0.0.1:<a port that was free a moment ago>.
// The extender keeps the address across a restart, as a Service would.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startExtender runs the extender in-process on addr against the cluster,
// with its default options (BestFit on GPU compute, as the plugin's
// defaults), and returns once /readyz answers 200. It is stopped when the
// test ends, if not before.
func startExtender(ctx context.Context, t *testing.T, c *testcluster.Cluster, addr string) *extender.Server {
	t.Helper()
	opts := extender.NewOptions()
	opts.BindAddress = addr
	return startExtenderAs(ctx, t, c.RestConfig, opts)
}

// startExtenderAs runs the extender with opts, its client built from config.
func startExtenderAs(ctx context.Context, t *testing.T, config *rest.Config, opts *extender.Options) *extender.Server {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx = klog.NewContext(ctx, logger)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := extender.Start(ctx, opts, client)
	if err != nil {
		t.Fatalf("starting the extender: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the extender: %v", err)
		}
	})
	url, probe := "http://"+opts.BindAddress+"/readyz", http.DefaultClient
	if opts.TLSCertFile != "" {
		// As the kubelet probes: HTTPS, no client certificate, the
		// serving certificate not checked.
		url = "https://" + opts.BindAddress + "/readyz"
		probe = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a readiness probe
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		resp, err := probe.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("extender not ready: %v", err)
	}
	return s
}

// createStockPod creates a pod for the stock scheduler: no schedulerName,
// so the default profile (default-scheduler) places it.
func createStockPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod *v1.Pod) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.UID = ""
	pod.Spec.SchedulerName = ""
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

// waitForEventWith polls until a FailedScheduling event of the pod contains
// every part, and returns its message. Unlike testcluster.WaitForPodEvent it
// skips the pod's other FailedScheduling events (such as those of an
// extender that was down).
func waitForEventWith(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod string, parts ...string) string {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.Regarding.Kind != "Pod" || ev.Regarding.Name != pod || ev.Reason != "FailedScheduling" {
				continue
			}
			last = ev.Note
			if containsEvery(ev.Note, parts) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event of pod %s with %q within %v; last: %q", pod, parts, timeout, last)
	}
	return last
}

func containsEvery(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// assertNotDeleted checks for the whole duration that the pod is neither gone
// nor being deleted.
func assertNotDeleted(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(testcluster.PollInterval) {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		if pod.DeletionTimestamp != nil {
			t.Fatalf("pod %s is being deleted (preempted)", name)
		}
		if !time.Now().Before(deadline) {
			return
		}
	}
}

// waitForDeletion waits until the pod is being deleted (a preemption victim).
func waitForDeletion(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err != nil || pod.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("pod %s was not preempted within %v", name, timeout)
	}
}

// waitForPriorityClass waits until the API server's Priority admission
// knows the class: it reads PriorityClasses from an informer, so a pod that
// names a class created a moment ago can be refused ("no PriorityClass with
// name ... was found"). A dry-run pod with the class shows when it is known.
func waitForPriorityClass(ctx context.Context, t *testing.T, c *testcluster.Cluster, class string) {
	t.Helper()
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "priority-probe", Namespace: "default"},
		Spec: v1.PodSpec{
			PriorityClassName: class,
			Containers:        []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, lastErr = c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("PriorityClass %s not usable: %v", class, lastErr)
	}
}
