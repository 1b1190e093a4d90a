package playground

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpusched/gpusched/internal/simnode"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
)

// MockGPU is the mock GPU the shape's nodes are built of: go-nvml's mock of
// the model when it has one (nvmlmock.Catalog: A100-40GB, A100-80GB,
// A30-24GB, H100-80GB, H200-141GB, B200-180GB), with NVML's product name and
// MIG profiles; otherwise a plain mock GPU that NVML reports under the
// shape's model name with the shape's memory, without MIG.
func (s NodeShape) MockGPU() gpus.Config {
	if cfg, ok := nvmlmock.Lookup(s.Model); ok {
		return cfg
	}
	return nvmlmock.PlainGPU(s.Model, uint64(s.MemoryMiB))
}

// machine builds the mock machine of the k-th node of the playground. The
// GPUs of go-nvml's SXM mocks (every catalog entry but the A30 PCIe card)
// are all NVLink peers, through NVSwitch as in a DGX; the others are PCIe
// cards without NVLink. Its GPU UUIDs are
// nvmlmock.MachineUUID(k, i), so every GPU of the playground has its own.
func (s NodeShape) machine(k int) (*nvmlmock.Machine, error) {
	cfg := s.MockGPU()
	island := nvmlmock.NoNVLink
	if _, mocked := nvmlmock.Lookup(s.Model); mocked && !strings.Contains(cfg.Name, "PCIE") {
		island = nvmlmock.AllPeers
	}
	m, err := nvmlmock.Build(s.GPUs, cfg, island)
	if err != nil {
		return nil, err
	}
	m.SetMachineNumber(k)
	return m, nil
}

// agents are the node agents of the playground's nodes, by node name.
type agents map[string]*simnode.Node

// agentStarts is how many node agents start at once: each start waits on
// its NRI plugin's registration and on the API server, so a few in
// parallel bring up a large node list (--nodes-from) several times faster.
const agentStarts = 16

// startAgents starts one node agent per node with GPUs: discovery over the
// node's mock machine, publishing the Node's gpusched.io/gpu-devices
// annotation, and the agent's NRI plugin on the node's own in-process
// container runtime, whose socket is in dir/<k>, k the node's position in
// nodes (which also numbers its GPUs' UUIDs, nvmlmock.MachineUUID). Up to
// agentStarts start at once. It returns once every Node carries its
// annotation; on error the agents already started are stopped.
func startAgents(ctx context.Context, config *rest.Config, dir string, nodes []ListedNode) (agents, error) {
	config = rest.CopyConfig(config)
	config.UserAgent = "gpusched-agent"
	config.QPS, config.Burst = -1, 0 // one client for every agent: no client-side rate limit
	// The agent binary's client.
	client, err := discovery.NewNodeClient(config)
	if err != nil {
		return nil, err
	}
	started := make([]*simnode.Node, len(nodes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(agentStarts)
	for k, l := range nodes {
		if l.GPUs.GPUs == 0 {
			continue
		}
		g.Go(func() error {
			m, err := l.GPUs.machine(k)
			if err != nil {
				return fmt.Errorf("node %s: %w", l.Node.Name, err)
			}
			started[k], err = simnode.Start(gctx, simnode.Config{
				Name:    l.Node.Name,
				Machine: m,
				Nodes:   client,
				Dir:     filepath.Join(dir, strconv.Itoa(k)),
			})
			return err
		})
	}
	err = g.Wait()
	a := agents{}
	for k, n := range started {
		if n != nil {
			a[nodes[k].Node.Name] = n
		}
	}
	if err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// stop stops every agent, all at once: each waits for its goroutines, one
// of which polls NVML's events every half second.
func (a agents) stop() {
	var wg sync.WaitGroup
	for _, n := range a {
		wg.Go(n.Stop)
	}
	wg.Wait()
}

// devices creates each bound pod's containers through its node's container
// runtime, where the node agent decides at CreateContainer what they get,
// and renders what that is: "NVIDIA_VISIBLE_DEVICES=<UUIDs>", or why the
// agent refused the container. Keyed by pod name; pods not bound are left
// out. Pods that have ended go first, and their sandboxes are stopped after
// (as the kubelet stops an ended pod's), since they ran, and left their
// GPUs, before the pods that run now.
func (a agents) devices(ctx context.Context, pods []*v1.Pod) map[string]string {
	out := map[string]string{}
	ended := func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed }
	pods = slices.Clone(pods)
	slices.SortStableFunc(pods, func(x, y *v1.Pod) int {
		switch {
		case ended(x) && !ended(y):
			return -1
		case ended(y) && !ended(x):
			return 1
		}
		return 0
	})
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		n, ok := a[p.Spec.NodeName]
		if !ok {
			out[p.Name] = "no agent on " + p.Spec.NodeName
			continue
		}
		ctrs, err := n.CreatePod(ctx, p)
		if err != nil {
			out[p.Name] = "refused: " + err.Error()
			continue
		}
		out[p.Name] = describeContainers(ctrs)
		if ended(p) {
			if err := n.StopPod(ctx, p); err != nil {
				out[p.Name] += " (stopping its sandbox: " + err.Error() + ")"
			}
		}
	}
	return out
}

// describeContainers renders the containers' GPUs: one value when every
// container gets the same (gpusched assigns GPUs to pods, so they do), else
// "<container>: <value>" for each.
func describeContainers(ctrs []simnode.Container) string {
	if len(ctrs) == 0 {
		return "-"
	}
	first := simnode.Describe(ctrs[0])
	var each []string
	same := true
	for _, c := range ctrs {
		d := simnode.Describe(c)
		same = same && d == first
		each = append(each, c.Name+": "+d)
	}
	if same {
		return first
	}
	return strings.Join(each, "; ")
}
