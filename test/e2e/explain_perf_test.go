//go:build perf

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestExplainAnnotationWriteCost measures, in one run, what storing the
// per-node detail of a failed attempt on the pod would cost the scheduler:
// gpusched's own throughput (pods per second, the example configuration,
// its default client limits) beside the rate of annotation PATCHes of a
// bounded detail (2 KiB) the same client limits allow. kubectl gpusched
// recomputes the detail instead (docs/explain.md). Run with:
//
//	go test -tags perf -run TestExplainAnnotationWriteCost -v ./test/e2e/
func TestExplainAnnotationWriteCost(t *testing.T) {
	const nodes, pods, patches = 100, 500, 300
	ctx := context.Background()
	c := testcluster.Start(t)
	for i := range nodes {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(fmt.Sprintf("gpu-%03d", i)).GFD(a100, 8, 81920).Obj())
	}
	rate := measure(ctx, t, c, pods, schedulerName, func() func() {
		return c.StartScheduler(ctx, t, exampleConfig(t), plugins.CommandOptions()...).Stop
	})

	// An unthrottled client: what one write costs the API server.
	client := fastClient(t, c)
	pod := gt.MakeGPUPod("waiting").GPUs(16).Obj()
	pod.UID = ""
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	detail := strings.Repeat("node-0000: insufficient free GPUs; ", 2048/36)
	began := time.Now()
	for i := range patches {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			"gpusched.io/unschedulable-detail": fmt.Sprintf("%d %s", i, detail)}}})
		if _, err := client.CoreV1().Pods("default").Patch(ctx, "waiting", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	perPatch := time.Since(began) / patches
	perPod := time.Duration(float64(time.Second) / rate)
	t.Logf("gpusched: %.1f pods/s (%v per pod); a 2 KiB annotation PATCH: %v unthrottled (%.0f%% of a pod's scheduling time); "+
		"at the scheduler's default 50 QPS each write takes 20 ms of a budget its binds and events share",
		rate, perPod.Round(time.Microsecond), perPatch.Round(time.Microsecond), 100*float64(perPatch)/float64(perPod))
}
