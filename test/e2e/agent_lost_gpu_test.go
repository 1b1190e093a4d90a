package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/internal/simnode"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestAgentGPULostE2E: a GPU falls off the bus under running pods, and NVML
// renumbers the GPUs after it. The node agent keeps the lost GPU in the
// node's inventory, unhealthy, at its index, and the other GPUs keep theirs
// (their minor numbers), so the scheduler's ledger still counts every
// running pod on its own GPU: the pods placed afterwards get the free GPUs,
// never the lost one nor one that a running pod holds, and the node's
// runtime creates their containers (the agent would refuse a GPU held by a
// live pod).
func TestAgentGPULostE2E(t *testing.T) {
	ctx := context.Background()
	simnode.QuietNRILogs()
	c := testcluster.Start(t)
	m := nvmlmock.DGXH100()
	agent := startAgents(ctx, t, c, []simulatedNode{{name: "dgx-0", machine: m, interval: 200 * time.Millisecond}})["dgx-0"]
	startGPUSched(ctx, t, c)

	held := map[string]string{} // GPU UUID -> pod
	place := func(name string) gpu.Assignment {
		t.Helper()
		createPod(ctx, t, c, gt.MakeGPUPod(name).GPUs(1).Obj())
		bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", name, timeout)
		a, err := gpu.ParseAssignment(bound.Annotations[gpu.AnnotationAssigned])
		if err != nil || len(a.UUIDs) != 1 {
			t.Fatalf("%s: assignment %q: %v", name, bound.Annotations[gpu.AnnotationAssigned], err)
		}
		if other, ok := held[a.UUIDs[0]]; ok {
			t.Errorf("%s is assigned %s (index %d), which %s holds", name, a.UUIDs[0], a.Devices[0], other)
		}
		if _, err := agent.CreatePod(ctx, bound); err != nil {
			t.Errorf("%s: the node refused its containers: %v", name, err)
		}
		held[a.UUIDs[0]] = name
		return a
	}
	var before []gpu.Assignment
	for i := range 4 {
		before = append(before, place(fmt.Sprintf("before-%d", i)))
	}
	// The lowest GPU a pod holds falls off the bus: every GPU after it moves
	// down one NVML index.
	lost := slices.MinFunc(before, func(a, b gpu.Assignment) int { return a.Devices[0] - b.Devices[0] })
	built := -1 // the GPU's position in the mock, which RemoveGPU takes
	for i := range 8 {
		if nvmlmock.GPUUUID(i) == lost.UUIDs[0] {
			built = i
		}
	}
	if built < 0 {
		t.Fatalf("GPU %s is not one of the mock's", lost.UUIDs[0])
	}
	published := func() (string, *gpu.Inventory) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, "dgx-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := gpu.InventoryFromNode(node)
		if err != nil {
			t.Fatal(err)
		}
		return node.Annotations[gpu.AnnotationDevices], inv
	}
	initial, _ := published()
	m.RemoveGPU(built)
	deadline := time.Now().Add(timeout)
	for {
		raw, inv := published()
		if raw != initial {
			t.Logf("inventory after the loss: %s", raw)
			if !slices.ContainsFunc(inv.Devices, func(d gpu.Device) bool {
				return d.UUID == lost.UUIDs[0] && d.Index == lost.Devices[0] && strings.HasPrefix(d.Unhealthy, "lost:")
			}) {
				t.Errorf("the agent did not publish GPU %s as lost at index %d", lost.UUIDs[0], lost.Devices[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not republish the inventory after GPU %s was lost", lost.UUIDs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The scheduler sees the new inventory once its informer has it.
	time.Sleep(time.Second)
	for i := range 4 {
		a := place(fmt.Sprintf("after-%d", i))
		if a.UUIDs[0] == lost.UUIDs[0] {
			t.Errorf("after-%d is assigned the lost GPU %s", i, a.UUIDs[0])
		}
	}
}
