package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/podgroup"
	"github.com/gpusched/gpusched/test/testcluster"
)

// playgroundModels are the playground's GPU nodes, by name, with their
// model: 2×A100:8, 1×H100:8, 2×T4:4 (40 GPUs).
var playgroundModels = map[string]string{"a100-0": a100, "a100-1": a100, "h100-0": h100, "t4-0": t4, "t4-1": t4}

func createPlaygroundNodes(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	for _, name := range slices.Sorted(maps.Keys(playgroundModels)) {
		model := playgroundModels[name]
		n := gt.MakeGPUNode(name).GFD(model, 8, 81920)
		if model == t4 {
			n = gt.MakeGPUNode(name).GFD(model, 4, 15360)
		}
		testcluster.CreateNode(ctx, t, c.Client, n.Obj())
	}
}

// createAnnotatedPodGroup creates a PodGroup in "default" with annotations.
func createAnnotatedPodGroup(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, minMember int, annotations map[string]string) {
	t.Helper()
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": podgroup.Group + "/" + podgroup.Version, "kind": podgroup.Kind,
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     map[string]any{"minMember": int64(minMember)},
	}}
	pg.SetAnnotations(annotations)
	if _, err := dyn.Resource(podgroup.Resource).Namespace("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodGroup %s: %v", name, err)
	}
}

// modelsOf waits until the gang's pods group-0..group-(n-1) are bound and
// returns how many landed on each GPU model.
func modelsOf(ctx context.Context, t *testing.T, c *testcluster.Cluster, group string, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for i := range n {
		out[playgroundModels[assignmentOf(ctx, t, c, fmt.Sprintf("%s-%d", group, i)).Node]]++
	}
	return out
}

// createGang creates the gang's pods group-0..group-(n-1), gpus GPUs each.
func createGang(ctx context.Context, t *testing.T, c *testcluster.Cluster, group string, n, gpus int) {
	t.Helper()
	for i := range n {
		createPod(ctx, t, c, gangPod(fmt.Sprintf("%s-%d", group, i), group, gpus))
	}
}

// TestGangOneModel reproduces the playground's case: a gang with no model
// constraint runs on one GPU model, the one that holds it all; later members
// follow the model of the first; a gang no single model holds is told so on
// its PodGroup and runs across models; a malformed opt-out is reported.
func TestGangOneModel(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createPlaygroundNodes(ctx, t, c)
	startGangSched(ctx, t, c, gangConfig(t))

	// Three pods of 4 GPUs (12): A100 has 2 × 8 = 16, H100 8, T4 2 × 4 = 8.
	// Only A100 holds all three.
	createPodGroup(ctx, t, dyn, "train", 3, 0)
	createGang(ctx, t, c, "train", 3, 4)
	if got := modelsOf(ctx, t, c, "train", 3); got[a100] != 3 {
		t.Errorf("train on %v, want all 3 pods on %s", got, a100)
	}

	// Two pods of 4 GPUs: every model holds them empty, but A100 has only 4
	// GPUs left (one pod) while H100 (8) and T4 (2 × 4) hold both now. The
	// first pod goes to H100 or T4, and the second follows its model.
	createPodGroup(ctx, t, dyn, "pair", 2, 0)
	createGang(ctx, t, c, "pair", 2, 4)
	if got := modelsOf(ctx, t, c, "pair", 2); len(got) != 1 || got[a100] != 0 {
		t.Errorf("pair on %v, want both pods on H100 or both on T4", got)
	}
	assertNoGPUGivenTwice(ctx, t, c)

	// Three pods of 8 GPUs, on an empty cluster: A100 holds 2 (one per
	// node), H100 1, T4 none (no node has 8), so no single model holds the
	// gang; the cluster does (2 + 1). The PodGroup says so and the gang
	// runs across A100 and H100.
	deletePods(ctx, t, c, "train-0", "train-1", "train-2", "pair-0", "pair-1")
	createPodGroup(ctx, t, dyn, "wide", 3, 0)
	createGang(ctx, t, c, "wide", 3, 8)
	containsAll(t, "PodGroup event", waitForPodGroupEvent(ctx, t, c, "wide", "GangMixedModels"),
		"gang default/wide: no single GPU model holds the gang's 3 pods (NVIDIA-A100-SXM4-80GB: 2 of 3 fit, NVIDIA-H100-80GB-HBM3: 1 of 3 fit, Tesla-T4: 0 of 3 fit); placing it across models")
	if got := modelsOf(ctx, t, c, "wide", 3); got[a100] != 2 || got[h100] != 1 {
		t.Errorf("wide on %v, want 2 pods on %s and 1 on %s", got, a100, h100)
	}
	assertNoGPUGivenTwice(ctx, t, c)

	// A malformed opt-out is an InvalidPodGroup event naming the
	// annotation, the value and what is allowed; nothing binds.
	createAnnotatedPodGroup(ctx, t, dyn, "bad", 1, map[string]string{podgroup.AnnotationGPUModels: "any"})
	createPod(ctx, t, c, gangPod("bad-0", "bad", 1))
	containsAll(t, "PodGroup event", waitForPodGroupEvent(ctx, t, c, "bad", "InvalidPodGroup"),
		`annotation gpusched.io/gang-gpu-models is "any"; it must be "one"`, `or "mixed"`)
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "bad-0", 0)
}

// TestGangOneModelOptOut: with the A100 nodes full, a gang that only A100
// holds waits for them, each other node refused with the reason; the same
// gang in a PodGroup annotated gpusched.io/gang-gpu-models: mixed runs at
// once across H100 and T4.
func TestGangOneModelOptOut(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	dyn := installPodGroupCRD(ctx, t, c)
	createPlaygroundNodes(ctx, t, c)
	startGangSched(ctx, t, c, gangConfig(t))

	// Two single pods of 8 GPUs, pinned to A100, fill both A100 nodes.
	for i := range 2 {
		createPod(ctx, t, c, gt.MakeGPUPod(fmt.Sprintf("fill-%d", i)).GPUs(8).Models(a100).Obj())
		assignmentOf(ctx, t, c, fmt.Sprintf("fill-%d", i))
	}

	// Three pods of 4 GPUs: only A100 (16) holds 12; H100 8 and T4 2 × 4
	// hold two each. The gang waits for A100; H100 and T4 are refused.
	createPodGroup(ctx, t, dyn, "one", 3, 0)
	createGang(ctx, t, c, "one", 3, 4)
	waitForEventWith(ctx, t, c, "one-0", "3 node's GPU model is not the gang's (NVIDIA-A100-SXM4-80GB)")
	testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", "one-0", 0)

	// Mixed: the same gang runs on what is free, H100 and T4 together.
	createAnnotatedPodGroup(ctx, t, dyn, "any", 3, map[string]string{podgroup.AnnotationGPUModels: podgroup.GPUModelsMixed})
	createGang(ctx, t, c, "any", 3, 4)
	if got := modelsOf(ctx, t, c, "any", 3); len(got) != 2 || got[h100]+got[t4] != 3 {
		t.Errorf("any on %v, want its 3 pods across %s and %s", got, h100, t4)
	}
	for i := range 3 {
		testcluster.AssertPodNotScheduled(ctx, t, c.Client, "default", fmt.Sprintf("one-%d", i), 0)
	}
	assertNoGPUGivenTwice(ctx, t, c)
}
