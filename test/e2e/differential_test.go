package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/extender"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins"
	"github.com/gpusched/gpusched/pkg/simulator"
	"github.com/gpusched/gpusched/pkg/trace"
	"github.com/gpusched/gpusched/test/testcluster"
)

// The differential test is the contract of the engine's one placement seam:
// the same cluster and the same pods, in the same order, placed by
//
//	(a) the simulator,
//	(b) the extender's handlers, driven in-process as the scheduler drives them,
//	(c) the live gpusched scheduler (GPUPlacement) on the API server,
//	(d) the stock kube-scheduler calling gpusched-extender,
//
// land every pod on the same node and the same GPUs, for every policy in the
// engine's registry. GPU placement alone decides in every front end: the
// profiles score with GPUPlacement or the extender only, so the scheduler's
// own scorers do not add their preferences.

// differentialArgs are the GPUPlacement args every front end runs: the
// policy, and for the fragmentation-aware ones a fixed distribution of pod
// shapes (nothing learned), so that every front end measures the same.
func differentialArgs(policy gpu.PolicyType) string {
	return fmt.Sprintf(`scoringStrategy:
  type: %s
  resources:
  - {name: nvidia.com/gpu, weight: 1}
  - {name: gpusched.io/gpu-memory, weight: 1}
fragmentation:
  halfLifePods: 0
  typicalPods:
  - {milliCPU: 4000, gpus: 1, weight: 4}
  - {milliCPU: 2000, gpus: 1, milliGPU: 500, weight: 3}
  - {milliCPU: 2000, gpus: 1, milliGPU: 250, weight: 2}
  - {milliCPU: 8000, gpus: 2, weight: 1}
`, policy)
}

// differentialConfig is the gpusched profile for the policy: GPUPlacement
// filters, scores alone, and binds.
func differentialConfig(policy gpu.PolicyType) string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - name: GPUPlacement
    score:
      disabled:
      - name: "*"
      enabled:
      - name: GPUPlacement
        weight: 1
    bind:
      enabled:
      - name: GPUPlacement
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: ["nvidia.com/gpu", "gpusched.io/gpu-milli", "gpusched.io/gpu-memory-mib"]
  - name: GPUPlacement
    args:
` + indent(differentialArgs(policy), "      ")
}

// stockConfig is the stock scheduler's profile for extender mode with the
// extender as the only scorer.
func stockConfig(addr string) string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
- schedulerName: stock
  plugins:
    score:
      disabled:
      - name: "*"
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: ["nvidia.com/gpu", "gpusched.io/gpu-milli", "gpusched.io/gpu-memory-mib"]
extenders:
- urlPrefix: http://` + addr + `
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 5s
`
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// differentialNodes differ in GPU count, model, GPU memory and CPU, so that
// no two nodes tie under any policy along the sequence (the test checks
// this at every step through the extender's scores).
func differentialNodes() []*v1.Node {
	return []*v1.Node{
		gt.MakeGPUNode("a100-8").GFD(a100, 8, 81920).CPU("61").Obj(),
		gt.MakeGPUNode("h100-4").GFD(h100, 4, 81559).CPU("47").Obj(),
		gt.MakeGPUNode("t4-3").GFD(t4, 3, 15360).CPU("29").Obj(),
		gt.MakeGPUNode("l4-2").GFD("NVIDIA-L4", 2, 23034).CPU("19").Obj(),
		gt.MakeGPUNode("a10-1").GFD("NVIDIA-A10", 1, 23028).CPU("11").Obj(),
	}
}

// differentialPods mix whole GPUs and shares (by annotation, and as the
// quota-counted resources), GPU memory and model constraints, pods with and
// without CPU requests. Every pod fits, and the
// sequence was chosen so that at every step one node scores highest under
// every registered policy (a policy added later may need it extended:
// driveExtender names the step and the nodes that tie).
func differentialPods() []*v1.Pod {
	type spec struct {
		gpus   int
		milli  int64
		cpu    string
		memory string
		models []string
		// asResources asks for the share and its memory with the
		// gpusched.io/gpu-milli and gpu-memory-mib resources.
		asResources bool
	}
	var pods []*v1.Pod
	for i, s := range []spec{
		{milli: 450, cpu: "3", memory: "10Gi"},
		{milli: 700, cpu: "3", models: []string{t4}},
		{milli: 700, cpu: "3", models: []string{t4}},
		{gpus: 3, cpu: "6"},
		{gpus: 4, cpu: "12"},
		{gpus: 2, cpu: "8", models: []string{a100, h100}},
		{gpus: 2, cpu: "8", models: []string{a100, h100}},
		{gpus: 2, cpu: "5"},
		{milli: 450, cpu: "3", memory: "10Gi", asResources: true},
		{milli: 500, cpu: "2", models: []string{"NVIDIA-L4", t4}},
		{milli: 800, memory: "12Gi"},
		{milli: 300, asResources: true},
		{cpu: "3"}, // no GPU, and room for it on every node: scored only by the policies that weigh CPU
		{milli: 250, cpu: "4"},
	} {
		p := gt.MakeGPUPod(fmt.Sprintf("diff-%02d", i))
		if s.cpu != "" {
			p = p.CPU(s.cpu)
		}
		switch {
		case s.gpus > 0:
			p = p.GPUs(s.gpus)
		case s.asResources:
			p = p.MilliResource(s.milli)
		case s.milli > 0:
			p = p.Milli(s.milli)
		}
		switch {
		case s.memory != "" && s.asResources:
			q := resource.MustParse(s.memory)
			p = p.MemoryResource(q.Value() >> 20)
		case s.memory != "":
			p = p.GPUMemory(s.memory)
		}
		if len(s.models) > 0 {
			p = p.Models(s.models...)
		}
		pods = append(pods, p.Obj())
	}
	return pods
}

// cpuOnly reports whether the pod asks for no GPU.
func cpuOnly(p *v1.Pod) bool {
	d, err := gpu.DemandFromPod(p)
	return err == nil && d.IsZero()
}

// placement is where a pod went: its node and GPU indices.
type placement struct {
	node string
	gpus string
}

func (p placement) String() string { return p.node + p.gpus }

func placementOf(node string, devices []int) placement {
	if devices == nil {
		return placement{node: node}
	}
	return placement{node: node, gpus: fmt.Sprint(devices)}
}

func TestDifferential(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	nodes := differentialNodes()
	for _, n := range nodes {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	runDifferential(ctx, t, c, nodes, true, nil)
}

// TestDifferentialWithDRANode: the same with a node whose 16 GPUs a DRA
// driver publishes, twice the GPUs of any other node. No pod here asks for
// them (GPU pods by annotation or resource never go there, in any front
// end), but they count in the cluster's largest GPU count that host-aware
// policies normalize by, in the plugin and in the extender alike (the
// extender read no slices for it before), and the pod without GPUs may go
// there. The simulator runs a cluster's GPUs all by annotation or all by
// DRA, so it sits this one out.
func TestDifferentialWithDRANode(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	nodes := append(differentialNodes(), gt.MakeGPUNode("dra-16").CPU("37").Obj())
	for _, n := range nodes {
		testcluster.CreateNode(ctx, t, c.Client, n)
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, nvidiaSlice("dra-16", 16), metav1.CreateOptions{})
		return err
	})
	// DotProd's scores at the extender API's 0..10 steps tie here: the
	// first share scores 10 on l4-2 and on a10-1, where a scheduler would
	// draw one at random.
	runDifferential(ctx, t, c, nodes, false, map[gpu.PolicyType]bool{gpu.PolicyDotProd: true})
}

// runDifferential places the differential pods with every front end, for
// every registered policy but those in skip, and checks that they agree;
// withSimulator adds the simulator to the front ends.
func runDifferential(ctx context.Context, t *testing.T, c *testcluster.Cluster, nodes []*v1.Node, withSimulator bool, skip map[gpu.PolicyType]bool) {
	all := differentialPods()
	for _, info := range gpu.Policies() {
		if skip[info.Type] {
			continue
		}
		// A pod without GPUs is placed by the policy only where it weighs
		// CPU (HostAware); under the others every node scores 0 and the
		// front ends' tie-breaks, not the policy, would decide. Two
		// host-aware policies tie too: FGD weighs CPU only through the GPU
		// capacity a pod's CPU use strands, and this pod strands none;
		// DotProd's scores for it differ by less than the extender API's
		// 0..10 steps, so several nodes score 10.
		pods := all
		if !info.HostAware || info.Type == gpu.PolicyFGD || info.Type == gpu.PolicyDotProd {
			pods = slices.DeleteFunc(slices.Clone(all), cpuOnly)
		}
		t.Run(string(info.Type), func(t *testing.T) {
			argsFile := filepath.Join(t.TempDir(), "placement-args.yaml")
			if err := os.WriteFile(argsFile, []byte(differentialArgs(info.Type)), 0o644); err != nil {
				t.Fatal(err)
			}
			type frontEnd struct {
				name string
				run  func(t *testing.T) []placement
			}
			var frontEnds []frontEnd
			if withSimulator {
				frontEnds = append(frontEnds, frontEnd{"simulator", func(t *testing.T) []placement { return simulateDifferential(ctx, t, info.Type, nodes, pods) }})
			}
			frontEnds = append(frontEnds,
				frontEnd{"extender handlers", func(t *testing.T) []placement { return driveExtender(ctx, t, c, argsFile, nodes, pods) }},
				frontEnd{"gpusched", func(t *testing.T) []placement { return runLiveGPUSched(ctx, t, c, info.Type, pods) }},
				frontEnd{"stock scheduler + extender", func(t *testing.T) []placement { return runStockWithExtender(ctx, t, c, argsFile, pods) }},
			)
			results := make([][]placement, len(frontEnds))
			for i, fe := range frontEnds {
				results[i] = fe.run(t)
				if len(results[i]) != len(pods) {
					t.Fatalf("%s placed %d of %d pods", fe.name, len(results[i]), len(pods))
				}
			}
			used := map[string]bool{}
			for j, p := range pods {
				want := results[0][j]
				used[want.node] = true
				for i := 1; i < len(frontEnds); i++ {
					if got := results[i][j]; got != want {
						t.Errorf("%s: %s placed it on %s, %s on %s", p.Name, frontEnds[i].name, got, frontEnds[0].name, want)
					}
				}
			}
			if len(used) < 2 {
				t.Errorf("every pod on one node: the sequence does not tell policies apart")
			}
			t.Logf("%s: %v", info.Type, results[0])
		})
	}
}

// simulateDifferential runs the pods through the simulator in order.
func simulateDifferential(ctx context.Context, t *testing.T, policy gpu.PolicyType, nodes []*v1.Node, pods []*v1.Pod) []placement {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(differentialConfig(policy)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := simulator.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := simulator.ProfilesFor(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	workload := make([]trace.Pod, len(pods))
	for i, p := range pods {
		workload[i] = trace.Pod{Pod: p, Created: int64(i), Deleted: trace.NeverDeleted, HasTimes: true}
	}
	runs, err := simulator.Simulate(ctx, simulator.Options{Nodes: nodes, Pods: workload, Profiles: profiles,
		Seeds: []int64{1}, Arrival: trace.ArrivalReplay, RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]placement{}
	for _, p := range runs[0].Placements {
		if p.Node == "" {
			t.Fatalf("simulator: %s not placed: %s", p.Pod, p.Reason)
		}
		byName[p.Pod] = placementOf(p.Node, p.GPUs)
	}
	out := make([]placement, 0, len(pods))
	for _, p := range pods {
		if pl, ok := byName[p.Name]; ok {
			out = append(out, pl)
		}
	}
	return out
}

// runLiveGPUSched places the pods one at a time with the gpusched scheduler.
func runLiveGPUSched(ctx context.Context, t *testing.T, c *testcluster.Cluster, policy gpu.PolicyType, pods []*v1.Pod) []placement {
	t.Helper()
	s := c.StartScheduler(ctx, t, differentialConfig(policy), plugins.CommandOptions()...)
	defer s.Stop()
	defer deleteAndWait(ctx, t, c, pods)
	return placeOneByOne(ctx, t, c, pods, schedulerName)
}

// runStockWithExtender places the pods one at a time with the stock
// scheduler calling the extender.
func runStockWithExtender(ctx context.Context, t *testing.T, c *testcluster.Cluster, argsFile string, pods []*v1.Pod) []placement {
	t.Helper()
	addr, stop := startPlacementExtender(ctx, t, c, argsFile)
	defer stop()
	s := c.StartScheduler(ctx, t, stockConfig(addr))
	defer s.Stop()
	defer deleteAndWait(ctx, t, c, pods)
	return placeOneByOne(ctx, t, c, pods, "stock")
}

// placeOneByOne creates each pod for the scheduler and waits for it to be
// bound before creating the next.
func placeOneByOne(ctx context.Context, t *testing.T, c *testcluster.Cluster, pods []*v1.Pod, scheduler string) []placement {
	t.Helper()
	var out []placement
	for _, p := range pods {
		p = p.DeepCopy()
		p.UID, p.Spec.SchedulerName = "", scheduler
		if _, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
		out = append(out, boundPlacement(ctx, t, c, p))
	}
	return out
}

// boundPlacement waits for the pod to be bound and returns where it went.
func boundPlacement(ctx context.Context, t *testing.T, c *testcluster.Cluster, p *v1.Pod) placement {
	t.Helper()
	bound := testcluster.WaitForPodScheduled(ctx, t, c.Client, p.Namespace, p.Name, timeout)
	if cpuOnly(bound) {
		if a, ok := bound.Annotations[gpu.AnnotationAssigned]; ok {
			t.Fatalf("pod %s without GPUs was assigned %q", p.Name, a)
		}
		return placementOf(bound.Spec.NodeName, nil)
	}
	devices, err := gpuAssignment(bound)
	if err != nil {
		t.Fatal(err)
	}
	return placementOf(bound.Spec.NodeName, devices)
}

// driveExtender is the scheduler's side of the extender protocol, in
// order for each pod: filter over every node, prioritize the feasible ones,
// bind to the one scored highest. It fails when two nodes tie at the top,
// where a real scheduler would pick one at random.
func driveExtender(ctx context.Context, t *testing.T, c *testcluster.Cluster, argsFile string, nodes []*v1.Node, pods []*v1.Pod) []placement {
	t.Helper()
	addr, stop := startPlacementExtender(ctx, t, c, argsFile)
	defer stop()
	defer deleteAndWait(ctx, t, c, pods)

	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	var out []placement
	for _, p := range pods {
		p = p.DeepCopy()
		p.UID, p.Spec.SchedulerName = "", "nobody" // no scheduler runs: the test binds through the extender
		created, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
		var filtered extenderv1.ExtenderFilterResult
		postJSON(t, addr, "filter", &extenderv1.ExtenderArgs{Pod: created, NodeNames: &names}, &filtered)
		if filtered.Error != "" || filtered.NodeNames == nil || len(*filtered.NodeNames) == 0 {
			t.Fatalf("%s: filter: %+v", p.Name, filtered)
		}
		var scores extenderv1.HostPriorityList
		postJSON(t, addr, "prioritize", &extenderv1.ExtenderArgs{Pod: created, NodeNames: filtered.NodeNames}, &scores)
		best, tie := "", false
		var bestScore int64 = -1
		for _, s := range scores {
			switch {
			case s.Score > bestScore:
				best, bestScore, tie = s.Host, s.Score, false
			case s.Score == bestScore:
				tie = true
			}
		}
		if tie {
			t.Fatalf("%s: nodes tie at the top (%v): the differential cluster must leave no ties", p.Name, scores)
		}
		var bound extenderv1.ExtenderBindingResult
		postJSON(t, addr, "bind", &extenderv1.ExtenderBindingArgs{PodName: created.Name, PodNamespace: created.Namespace, PodUID: created.UID, Node: best}, &bound)
		if bound.Error != "" {
			t.Fatalf("%s: bind to %s: %s", p.Name, best, bound.Error)
		}
		out = append(out, boundPlacement(ctx, t, c, created))
	}
	return out
}

// startPlacementExtender runs the extender with the args file on a free
// loopback address, and returns the address and how to stop it.
func startPlacementExtender(ctx context.Context, t *testing.T, c *testcluster.Cluster, argsFile string) (string, func()) {
	t.Helper()
	addr := freeLoopbackAddr(t)
	opts := extender.NewOptions()
	opts.BindAddress, opts.PlacementArgsFile = addr, argsFile
	// It binds the stock profile's pods, and those driveExtender places by
	// playing the scheduler itself.
	opts.SchedulerNames = []string{"stock", "nobody"}
	ext := startExtenderAs(ctx, t, c.RestConfig, opts)
	return addr, func() { _ = ext.Stop() }
}

// postJSON posts in to the extender's verb and decodes the answer into out.
func postJSON(t *testing.T, addr, verb string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/"+verb, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d", verb, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: decoding the answer: %v", verb, err)
	}
}

// deleteAndWait deletes the pods at once and waits until they are gone, so
// that the next front end starts from idle GPUs.
func deleteAndWait(ctx context.Context, t *testing.T, c *testcluster.Cluster, pods []*v1.Pod) {
	t.Helper()
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	deletePods(ctx, t, c, names...)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("pods not deleted: %v", err)
	}
}
