package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// telemetryConfig enables GPUPlacement (BestFit) and GPUTelemetry, the latter
// weighing five times as much, reading Prometheus at address every second
// with a 500 ms timeout; telemetry older than 3 s is stale.
func telemetryConfig(address string) string {
	return fmt.Sprintf(`
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
      - name: GPUTelemetry
        weight: 5
  pluginConfig:
  - name: GPUPlacement
    args:
      scoringStrategy:
        type: BestFit
  - name: GPUTelemetry
    args:
      prometheus:
        address: %s
      refreshInterval: 1s
      queryTimeout: 500ms
      maxAge: 3s
      health:
        xidWindow: 1m
`, address)
}

// queryTimeoutBucket is the histogram bucket just above the 500 ms query
// timeout: every refresh, however slow or dead Prometheus is, ends in it.
const queryTimeoutBucket = 1.024

// TestTelemetryPlacement runs a real Prometheus scraping a synthetic DCGM
// exporter, and gpusched with GPUPlacement and GPUTelemetry reading it
// through a proxy that can be made slow. It shows pods moving off busy GPUs
// and unhealthy ones, then scheduling going on when Prometheus answers too
// slowly and when it is stopped, with the staleness in the metrics and no
// refresh outlasting the query timeout.
func TestTelemetryPlacement(t *testing.T) {
	ctx := t.Context()
	exporter := startDCGMExporter(t)
	gpus := map[string]dcgmGPU{
		"a0": {node: "tel-a", hostLabel: "Hostname", index: 0, uuid: "GPU-a0", model: a100},
		"a1": {node: "tel-a", hostLabel: "Hostname", index: 1, uuid: "GPU-a1", model: a100},
		"b0": {node: "tel-b", hostLabel: "hostname", index: 0, uuid: "GPU-b0", model: a100},
		"b1": {node: "tel-b", hostLabel: "hostname", index: 1, uuid: "GPU-b1", model: a100},
		"c0": {node: "tel-c", hostLabel: "Hostname", index: 0, uuid: "GPU-c0", model: t4},
		"c1": {node: "tel-c", hostLabel: "Hostname", index: 1, uuid: "GPU-c1", model: t4},
	}
	for _, g := range gpus {
		exporter.set("DCGM_FI_DEV_GPU_UTIL", g, "0")
		exporter.set("DCGM_FI_DEV_XID_ERRORS", g, "0")
		exporter.set("DCGM_FI_DEV_FB_FREE", g, "80000")
		exporter.set("DCGM_FI_DEV_FB_USED", g, "0")
	}
	// Malformed and partial data the plugin must skip: no host label, no
	// GPU identity, a NaN.
	exporter.setRaw(`DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"}`, "50")
	exporter.setRaw(`DCGM_FI_DEV_GPU_UTIL{Hostname="tel-a"}`, "50")
	exporter.setRaw(`DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-a1",Hostname="tel-a"}`, "NaN")

	prom := startPrometheus(t, exporter.addr())
	prom.waitForValue(ctx, t, `DCGM_FI_DEV_GPU_UTIL{UUID="GPU-c1"}`, "0")
	proxy := startDelayingProxy(t, prom.url)

	c := testcluster.Start(t)
	device := func(index int, uuid, model string) gpu.Device {
		return gpu.Device{Index: index, UUID: uuid, Model: model, MemoryMiB: 81920}
	}
	for _, n := range []*gt.NodeWrapper{
		gt.MakeGPUNode("tel-a").Devices(device(0, "GPU-a0", a100), device(1, "GPU-a1", a100)),
		gt.MakeGPUNode("tel-b").Devices(device(0, "GPU-b0", a100), device(1, "GPU-b1", a100)),
		gt.MakeGPUNode("tel-c").Devices(device(0, "GPU-c0", t4), device(1, "GPU-c1", t4)),
	} {
		testcluster.CreateNode(ctx, t, c.Client, n.Obj())
	}
	c.StartScheduler(ctx, t, telemetryConfig(proxy.srv.URL),
		plugins.CommandOptions()...)
	waitForMetric(ctx, t, "gpusched_telemetry_stale", "0 (fresh)", func(v float64) bool { return v == 0 })

	// setUtil exports the utilization of GPUs and waits until the plugin has
	// read it back through Prometheus.
	setUtil := func(t *testing.T, value string, names ...string) {
		t.Helper()
		for _, name := range names {
			exporter.set("DCGM_FI_DEV_GPU_UTIL", gpus[name], value)
		}
		for _, name := range names {
			prom.waitForValue(ctx, t, fmt.Sprintf(`DCGM_FI_DEV_GPU_UTIL{UUID="%s"}`, gpus[name].uuid), value)
		}
		waitForRefreshes(ctx, t, 2)
	}

	t.Run("pods move off busy GPUs", func(t *testing.T) {
		setUtil(t, "95", "a0", "a1")
		createPod(ctx, t, c, gt.MakeGPUPod("tel-1").GPUs(1).Models(a100).Obj())
		if a := assignmentOf(ctx, t, c, "tel-1"); a.Node != "tel-b" {
			t.Errorf("tel-1: %s, want tel-b: tel-a's GPUs are 95%% busy", a.String())
		}
		// Now tel-b is busy and tel-a idle. BestFit alone would put the
		// next pod beside tel-1 on tel-b; telemetry outweighs it.
		setUtil(t, "95", "b0", "b1")
		setUtil(t, "3", "a0", "a1")
		createPod(ctx, t, c, gt.MakeGPUPod("tel-2").GPUs(1).Models(a100).Obj())
		if a := assignmentOf(ctx, t, c, "tel-2"); a.Node != "tel-a" {
			t.Errorf("tel-2: %s, want tel-a: tel-b's GPUs are 95%% busy", a.String())
		}
		if f := metricFamily(t, "gpusched_telemetry_signal_score"); f == nil || !hasLabel(f, "signal", "utilization") {
			t.Errorf("no gpusched_telemetry_signal_score{signal=\"utilization\"} observed")
		}
	})

	t.Run("pods get healthy GPUs only", func(t *testing.T) {
		exporter.set("DCGM_FI_DEV_XID_ERRORS", gpus["c0"], "79")
		prom.waitForValue(ctx, t, `max_over_time(DCGM_FI_DEV_XID_ERRORS{UUID="GPU-c0"}[1m])`, "79")
		waitForRefreshes(ctx, t, 2)
		createPod(ctx, t, c, gt.MakeGPUPod("tel-3").GPUs(1).Models(t4).Obj())
		// BestFit alone takes the lowest free GPU, 0; it reported XID 79.
		if a := assignmentOf(ctx, t, c, "tel-3"); a.Node != "tel-c" || !slices.Equal(a.Devices, []int{1}) {
			t.Errorf("tel-3: %s, want tel-c GPU 1: GPU 0 reported XID 79", a.String())
		}
		// GPU 0 is free but unhealthy: a second T4 pod must not get it.
		createPod(ctx, t, c, gt.MakeGPUPod("tel-4").GPUs(1).Models(t4).Obj())
		msg := waitForEventWith(ctx, t, c, "tel-4", "unhealthy GPUs excluded", "GPU 0: XID 79")
		t.Logf("tel-4: %s", msg)
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "tel-4", 2*time.Second)
	})

	t.Run("Prometheus answering slowly", func(t *testing.T) {
		errorsBefore := metricValue(t, "gpusched_telemetry_refresh_errors_total")
		proxy.delay.Store(int64(3 * time.Second))
		waitForMetric(ctx, t, "gpusched_telemetry_stale", "1 (stale)", func(v float64) bool { return v == 1 })
		createPod(ctx, t, c, gt.MakeGPUPod("tel-5").GPUs(1).Models(a100).Obj())
		assignmentOf(ctx, t, c, "tel-5")
		if after := metricValue(t, "gpusched_telemetry_refresh_errors_total"); after <= errorsBefore {
			t.Errorf("refresh errors %v, want more than %v: the slow refreshes time out", after, errorsBefore)
		}
		assertRefreshesWithinTimeout(t)
		// Answering in time again, telemetry is fresh again.
		proxy.delay.Store(0)
		waitForMetric(ctx, t, "gpusched_telemetry_stale", "0 (fresh)", func(v float64) bool { return v == 0 })
	})

	t.Run("Prometheus stopped", func(t *testing.T) {
		prom.stop()
		waitForMetric(ctx, t, "gpusched_telemetry_stale", "1 (stale)", func(v float64) bool { return v == 1 })
		if age := metricValue(t, "gpusched_telemetry_age_seconds"); age <= 3 {
			t.Errorf("telemetry age %vs, want more than maxAge 3s", age)
		}
		createPod(ctx, t, c, gt.MakeGPUPod("tel-6").GPUs(1).Models(a100).Obj())
		assignmentOf(ctx, t, c, "tel-6")
		assertRefreshesWithinTimeout(t)
	})
	assertNoGPUGivenTwice(ctx, t, c)
}

// assertRefreshesWithinTimeout checks that no refresh of the telemetry took
// longer than the bucket above the query timeout.
func assertRefreshesWithinTimeout(t *testing.T) {
	t.Helper()
	total, below := histogramCounts(t, "gpusched_telemetry_refresh_duration_seconds", queryTimeoutBucket)
	if total == 0 || below != total {
		t.Errorf("%d of %d telemetry refreshes took more than %vs; the query timeout is 500ms", total-below, total, queryTimeoutBucket)
	}
}
