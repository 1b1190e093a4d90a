package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpusched/gpusched/internal/simnode"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// TestAgentHandoffE2E follows gpusched's decision from the scheduler to the
// containers, with nothing simulated but the GPUs and the kubelet:
//
//   - three nodes whose Node objects carry no GPU labels: one node agent per
//     node discovers the node's GPUs on a go-nvml mock machine (DGX A100,
//     DGX H100, four PCIe A100s) and publishes gpusched.io/gpu-devices
//     through its publisher, against the API server;
//   - the gpusched scheduler, as users run it, places whole-GPU pods of
//     several sizes, shares and a pod without GPUs from those annotations;
//   - each pod's containers, read back from the API server, are created
//     through its node's NRI runtime (NRI's adaptation in process, the
//     agent's plugin connected over a unix socket), where the agent decides
//     what they get.
//
// Every container of a pod receives exactly the UUIDs of its assignment; a
// pod without GPUs receives none; no whole GPU reaches two pods and no GPU
// more pods than its capacity, counted over every agent's record; shares
// placed on one GPU all receive that GPU; and a pod created on a node its
// assignment does not name is refused.
func TestAgentHandoffE2E(t *testing.T) {
	ctx := context.Background()
	simnode.QuietNRILogs()
	c := testcluster.Start(t)
	agents := startAgents(ctx, t, c, []simulatedNode{
		{name: "dgx-a100-0", machine: nvmlmock.DGXA100()},
		{name: "dgx-h100-0", machine: nvmlmock.DGXH100()},
		{name: "pcie-a100-0", machine: mustBuild(t, 4, gpus.A100_PCIE_80GB)},
	})
	startGPUSched(ctx, t, c)

	train2 := gt.MakeGPUPod("train-2").GPUs(2).Obj()
	// Every container of a GPU pod gets the pod's GPUs, not only the one
	// that requests them.
	train2.Spec.InitContainers = []v1.Container{{Name: "fetch", Image: "registry.k8s.io/pause:3.10"}}
	train2.Spec.Containers = append(train2.Spec.Containers, v1.Container{Name: "sidecar", Image: "registry.k8s.io/pause:3.10"})
	pods := []*v1.Pod{
		gt.MakeGPUPod("train-8").GPUs(8).Obj(),
		gt.MakeGPUPod("train-4").GPUs(4).Obj(),
		train2,
		gt.MakeGPUPod("train-1-a").GPUs(1).Obj(),
		gt.MakeGPUPod("train-1-b").GPUs(1).Obj(),
		gt.MakeGPUPod("infer-a").Milli(500).Obj(),
		gt.MakeGPUPod("infer-b").Milli(500).Obj(),
		gt.MakeGPUPod("notebook-a").Milli(250).GPUMemory("10Gi").Obj(),
		gt.MakeGPUPod("notebook-b").Milli(250).GPUMemory("10Gi").Obj(),
		gt.MakeGPUPod("cpu-only").Obj(),
	}
	for _, p := range pods {
		createPod(ctx, t, c, p)
	}

	milli := map[string]int64{} // pod -> milli-GPU per GPU, from its assignment
	given := map[string][]string{}
	for _, p := range pods {
		bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", p.Name, timeout)
		node := agents[bound.Spec.NodeName]
		ctrs, err := node.CreatePod(ctx, bound)
		if err != nil {
			t.Fatalf("%s on %s: %v", p.Name, bound.Spec.NodeName, err)
		}
		if len(ctrs) != len(p.Spec.InitContainers)+len(p.Spec.Containers) {
			t.Fatalf("%s: %d containers created, want %d", p.Name, len(ctrs), len(p.Spec.InitContainers)+len(p.Spec.Containers))
		}
		want := []string{} // a pod without GPUs gets none
		if raw, ok := bound.Annotations[gpu.AnnotationAssigned]; ok {
			a, err := gpu.ParseAssignment(raw)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			if a.Node != bound.Spec.NodeName || len(a.UUIDs) != len(a.Devices) {
				t.Fatalf("%s bound to %s has assignment %q: want this node and one UUID per GPU (the agent published them)", p.Name, bound.Spec.NodeName, raw)
			}
			want, milli[p.Name] = a.UUIDs, a.Milli
		}
		for _, ctr := range ctrs {
			got, err := simnode.GivenGPUs(ctr)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%s container %s on %s receives %v (%s, %v), want exactly %v",
					p.Name, ctr.Name, bound.Spec.NodeName, got, simnode.Describe(ctr), err, want)
			}
		}
		given[p.Name] = want
		t.Logf("%s on %s: %s", p.Name, bound.Spec.NodeName, simnode.Describe(ctrs[0]))
	}
	if n := len(given["train-8"]); n != 8 {
		t.Errorf("train-8 receives %d GPUs", n)
	}

	checkHoldings(t, agents, milli)
	checkSharesShareAGPU(t, given)
	assertNoGPUGivenTwice(ctx, t, c)

	// A pod's containers created on another node than its assignment's:
	// the agent there refuses them, naming both nodes.
	bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, "default", "train-1-a", timeout)
	for name, other := range agents {
		if name == bound.Spec.NodeName {
			continue
		}
		_, err := other.CreatePod(ctx, bound)
		if err == nil {
			t.Fatalf("train-1-a, assigned GPUs on %s, was given GPUs on %s", bound.Spec.NodeName, name)
		}
		containsAll(t, "refusal", err.Error(), "default/train-1-a", gpu.AnnotationAssigned,
			fmt.Sprintf("the assignment names node %q, but the container is being created on node %q", bound.Spec.NodeName, name))
		break
	}
}

// simulatedNode is a node of the hand-off test and its mock GPUs.
type simulatedNode struct {
	name    string
	machine *nvmlmock.Machine
	// interval between the agent's rediscoveries; the agent's default when 0.
	interval time.Duration
}

// startAgents creates each node (no GPU labels, allocatable nvidia.com/gpu as
// the agent's device plugin would advertise it) and starts its agent, which
// publishes the node's GPUs before startAgents returns. The k-th machine's
// GPUs get UUIDs nvmlmock.MachineUUID(k, i), so no two nodes share one.
func startAgents(ctx context.Context, t *testing.T, c *testcluster.Cluster, nodes []simulatedNode) map[string]*simnode.Node {
	t.Helper()
	config := rest.CopyConfig(c.RestConfig)
	config.UserAgent = "gpusched-agent"
	// The agent binary's client.
	client, err := discovery.NewNodeClient(config)
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]*simnode.Node{}
	for k, n := range nodes {
		count, _ := n.machine.DeviceGetCount()
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(n.name).AllocatableGPUs(count).Obj())
		n.machine.SetMachineNumber(k)
		agent, err := simnode.Start(ctx, simnode.Config{
			Name:     n.name,
			Machine:  n.machine,
			Nodes:    client,
			Dir:      filepath.Join(t.TempDir(), "nri"),
			Interval: n.interval,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(agent.Stop)
		agents[n.name] = agent
	}
	return agents
}

func mustBuild(t *testing.T, n int, cfg gpus.Config) *nvmlmock.Machine {
	t.Helper()
	m, err := nvmlmock.Build(n, cfg, nvmlmock.NoNVLink)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkHoldings sums, over every agent's own record of the containers it
// gave GPUs to, the milli-GPU of the distinct pods holding each GPU: a whole
// GPU (1000) has one holder, and no GPU is held beyond 1000.
func checkHoldings(t *testing.T, agents map[string]*simnode.Node, milli map[string]int64) {
	t.Helper()
	holders := map[string][]string{} // node/UUID -> pods
	for name, agent := range agents {
		for _, r := range agent.Plugin.Containers() {
			pod := strings.TrimPrefix(r.Pod, "default/")
			for _, u := range r.UUIDs {
				key := name + "/" + u
				if !slices.Contains(holders[key], pod) {
					holders[key] = append(holders[key], pod)
				}
			}
		}
	}
	for gpuKey, pods := range holders {
		var sum int64
		for _, p := range pods {
			sum += milli[p]
		}
		if sum > gpu.MilliPerGPU {
			t.Errorf("GPU %s is given to %v, %d milli-GPU in all", gpuKey, pods, sum)
		}
	}
}

// checkSharesShareAGPU: the four shares (500+500+250+250 milli) fit on two
// GPUs, and the scheduler packs shares, so at least one GPU is given to two
// of them at once.
func checkSharesShareAGPU(t *testing.T, given map[string][]string) {
	t.Helper()
	byGPU := map[string][]string{}
	for _, p := range []string{"infer-a", "infer-b", "notebook-a", "notebook-b"} {
		if len(given[p]) != 1 {
			t.Fatalf("share %s receives %v, want one GPU", p, given[p])
		}
		byGPU[given[p][0]] = append(byGPU[given[p][0]], p)
	}
	for _, pods := range byGPU {
		if len(pods) > 1 {
			return
		}
	}
	t.Errorf("no two shares were given the same GPU: %v", byGPU)
}
