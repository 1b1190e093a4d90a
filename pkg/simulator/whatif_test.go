package simulator_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/simulator"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
	"github.com/gpusched/gpusched/pkg/whatif"
)

// TestWhatIfAgreesWithSimulate holds pkg/whatif to the simulator: on
// random small clusters (GPU nodes of mixed models and counts, NVLink
// groups, CPU-only nodes, taints, labels, cordons, a malformed inventory)
// and random workloads (whole GPUs 1–8, shares with and without GPU
// memory, model lists, CPU and memory requests, node selectors,
// tolerations, required node affinity by label and by node name, pods
// without GPUs), the real simulator — the built-in
// profile through the scheduling framework, replay arrival in file order
// with no departures, node-order tie-break, placements recorded — and
// what-if must place every pod on the same node and GPUs, and fail the
// same pods with the same message, under every registered policy and the
// default.
//
// Each case runs twice: every pod new on the empty cluster; and the first
// half of the pods bound where the simulator put them (with their
// assignment annotations, the unplaced ones pending), the last nodes given
// as extra nodes, the second half new. The second run checks what-if's
// reading of a live cluster.
func TestWhatIfAgreesWithSimulate(t *testing.T) {
	cfg, err := simulator.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	policies := append(gpu.PolicyNames(), simulator.DefaultPolicy)
	profiles, err := simulator.ProfilesFor(cfg, policies)
	if err != nil {
		t.Fatal(err)
	}
	cases := 64
	if testing.Short() {
		cases = 8
	}
	var placed, failed int
	for c := range cases {
		seed := int64(42 + c)
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		dir := t.TempDir()
		nodes := loadNodes(t, dir, randomNodes(rng))
		pods := loadPods(t, dir, randomPods(rng))

		runs, err := simulator.Simulate(context.Background(), simulator.Options{
			Nodes: nodes, Pods: pods, Profiles: profiles, Seeds: []int64{seed},
			Arrival: trace.ArrivalReplay, TieBreak: report.TieBreakNodeOrder, RecordPlacements: true,
		})
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		newPods := make([]*v1.Pod, len(pods))
		for i := range pods {
			newPods[i] = pods[i].Pod
		}
		results, err := whatif.Run(whatif.Input{Nodes: nodes, NewPods: newPods}, whatif.Options{Policies: policies, Seed: seed})
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		for i, run := range runs {
			compare(t, fmt.Sprintf("case %d (seed %d), %s, all new", c, seed, run.Policy), run.Placements, results[i].Placements)
			for _, p := range run.Placements {
				if p.Node != "" {
					placed++
				} else {
					failed++
				}
			}

			// The first half bound, the last two nodes extra.
			half, extra := len(pods)/2, min(2, len(nodes)-1)
			bound := boundPods(t, newPods[:half], run.Placements[:half])
			live, err := whatif.Run(whatif.Input{
				Nodes: nodes[:len(nodes)-extra], ExtraNodes: nodes[len(nodes)-extra:], Pods: bound, NewPods: newPods[half:],
			}, whatif.Options{Policies: []string{policies[i]}, Seed: seed})
			if err != nil {
				t.Fatalf("case %d, %s, live: %v", c, run.Policy, err)
			}
			compare(t, fmt.Sprintf("case %d (seed %d), %s, half bound", c, seed, run.Policy), run.Placements[half:], live[0].Placements)
		}
	}
	t.Logf("%d cases × %d policies: %d placements and %d failures agree", cases, len(policies), placed, failed)
}

// compare requires what-if's placements to be the simulator's.
func compare(t *testing.T, what string, sim []report.PodPlacement, got []whatif.Placement) {
	t.Helper()
	if len(sim) != len(got) {
		t.Fatalf("%s: %d placements from the simulator, %d from what-if", what, len(sim), len(got))
	}
	for j := range sim {
		s, w := sim[j], got[j]
		if s.Node != w.Node || !slices.Equal(s.GPUs, w.GPUs) || s.Reason != w.Reason {
			t.Errorf("%s, pod %d (%s):\n simulator %s %v %q\n what-if   %s %v %q",
				what, j, s.Pod, s.Node, s.GPUs, s.Reason, w.Node, w.GPUs, w.Reason)
		}
	}
}

// boundPods are pods bound where the simulator placed them, with the
// assignment annotation GPUPlacement writes; a pod it did not place stays
// pending.
func boundPods(t *testing.T, pods []*v1.Pod, placements []report.PodPlacement) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		b := p.DeepCopy()
		out[i] = b
		if placements[i].Node == "" {
			continue
		}
		b.Spec.NodeName = placements[i].Node
		b.Status.Phase = v1.PodRunning
		if len(placements[i].GPUs) == 0 {
			continue
		}
		d, err := gpu.DemandFromPod(b)
		if err != nil {
			t.Fatal(err)
		}
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		a := gpu.Assignment{Node: placements[i].Node, Devices: placements[i].GPUs, Milli: d.Milli}
		if d.IsShare() {
			a.MemoryMiB = d.MemoryMiB
		}
		b.Annotations[gpu.AnnotationAssigned] = a.String()
	}
	return out
}

func loadNodes(t *testing.T, dir, yaml string) []*v1.Node {
	t.Helper()
	path := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes, err := trace.LoadNodes(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml)
	}
	return nodes
}

// loadPods reads the pods as `gpusched simulate --pods` does. They share
// one creation time, so replay takes them in file order, and have no
// deletion time, so none leaves.
func loadPods(t *testing.T, dir, yaml string) []trace.Pod {
	t.Helper()
	path := filepath.Join(dir, "pods.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	pods, err := trace.LoadPods(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml)
	}
	return pods
}

// gpuModel is a GPU model the random clusters use, with its memory and
// the GPU counts its nodes come in.
type gpuModel struct {
	name   string
	memory int64
	counts []int
}

var models = []gpuModel{
	{"NVIDIA-A100-SXM4-80GB", 81920, []int{4, 8}},
	{"NVIDIA-H100-80GB-HBM3", 81920, []int{8}},
	{"Tesla-T4", 15360, []int{1, 2, 4}},
	{"Tesla-V100-SXM2-32GB", 32768, []int{2, 4, 8}},
}

// randomNodes is 3–10 nodes as YAML Node objects.
func randomNodes(rng *rand.Rand) string {
	var b strings.Builder
	n := 3 + rng.IntN(8)
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-%d\n", i)
		labels := map[string]string{"pool": []string{"a", "b"}[rng.IntN(2)]}
		var annotations []string
		gpus := 0
		switch r := rng.IntN(10); {
		case r == 0: // CPU only
		case r == 1 && i > 0: // a malformed inventory: no GPU pod lands here
			labels[gpu.LabelProduct] = "Tesla-T4"
			labels[gpu.LabelMemory] = "lots"
			gpus = 2
		case r <= 3: // explicit devices in two NVLink groups
			m := models[rng.IntN(2)]
			gpus = 8
			var devs []string
			for d := range gpus {
				devs = append(devs, fmt.Sprintf(`{"index":%d,"model":%q,"memoryMiB":%d,"group":"nvl%d"}`, d, m.name, m.memory, d/4))
			}
			annotations = append(annotations, fmt.Sprintf("%s: '[%s]'", gpu.AnnotationDevices, strings.Join(devs, ",")))
		default: // GPU Feature Discovery labels
			m := models[rng.IntN(len(models))]
			gpus = m.counts[rng.IntN(len(m.counts))]
			labels[gpu.LabelProduct] = m.name
			labels[gpu.LabelMemory] = fmt.Sprint(m.memory)
		}
		b.WriteString("  labels:\n")
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			fmt.Fprintf(&b, "    %s: %q\n", k, labels[k])
		}
		if len(annotations) > 0 {
			fmt.Fprintf(&b, "  annotations:\n    %s\n", strings.Join(annotations, "\n    "))
		}
		b.WriteString("spec:\n")
		if rng.IntN(12) == 0 {
			b.WriteString("  unschedulable: true\n")
		}
		if rng.IntN(6) == 0 {
			b.WriteString("  taints:\n  - key: dedicated\n    value: train\n    effect: NoSchedule\n")
		}
		fmt.Fprintf(&b, "status:\n  allocatable:\n    cpu: %q\n    memory: %dGi\n    pods: %q\n",
			fmt.Sprint([]int{8, 16, 32, 64, 96}[rng.IntN(5)]), []int{32, 64, 256, 512}[rng.IntN(4)], fmt.Sprint(8+rng.IntN(103)))
		if gpus > 0 {
			fmt.Fprintf(&b, "    %s: %q\n", gpu.ResourceGPU, fmt.Sprint(gpus))
		}
	}
	return b.String()
}

// randomNodeAffinity is a required node affinity of one or two terms,
// each naming nodes (some not in the cluster) by metadata.name, once in a
// while with a second, conflicting list, or selecting a pool by label.
func randomNodeAffinity(rng *rand.Rand) string {
	names := func() string {
		var out []string
		for range 1 + rng.IntN(3) {
			out = append(out, fmt.Sprintf("node-%d", rng.IntN(12)))
		}
		return strings.Join(out, ", ")
	}
	var b strings.Builder
	b.WriteString("  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n")
	for range 1 + rng.IntN(2) {
		switch rng.IntN(4) {
		case 0:
			b.WriteString("        - matchExpressions:\n          - {key: pool, operator: In, values: [a]}\n")
		case 1:
			fmt.Fprintf(&b, "        - matchFields:\n          - {key: metadata.name, operator: In, values: [%s]}\n          - {key: metadata.name, operator: In, values: [%s]}\n", names(), names())
		default:
			fmt.Fprintf(&b, "        - matchFields:\n          - {key: metadata.name, operator: In, values: [%s]}\n", names())
		}
	}
	return b.String()
}

// randomPods is 10–60 YAML Pod objects with one creation time.
func randomPods(rng *rand.Rand) string {
	var b strings.Builder
	n := 10 + rng.IntN(51)
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: pod-%02d\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n", i)
		var annotations []string
		limits := ""
		switch r := rng.IntN(20); {
		case r < 2: // no GPU
		case r < 10: // whole GPUs
			limits = fmt.Sprintf("      limits:\n        %s: %q\n", gpu.ResourceGPU, fmt.Sprint([]int{1, 1, 1, 2, 2, 4, 8}[rng.IntN(7)]))
		default: // a share
			annotations = append(annotations, fmt.Sprintf("%s: %q", gpu.AnnotationMilli, fmt.Sprint(50*(1+rng.IntN(19)))))
			if rng.IntN(3) == 0 {
				annotations = append(annotations, fmt.Sprintf("%s: %q", gpu.AnnotationMemory, fmt.Sprint([]int{2048, 8192, 20000, 40000}[rng.IntN(4)])))
			}
		}
		if (limits != "" || len(annotations) > 0) && rng.IntN(5) == 0 {
			m1, m2 := models[rng.IntN(len(models))].name, models[rng.IntN(len(models))].name
			annotations = append(annotations, fmt.Sprintf("%s: '[%q,%q]'", gpu.AnnotationModels, m1, m2))
		}
		if len(annotations) > 0 {
			fmt.Fprintf(&b, "  annotations:\n    %s\n", strings.Join(annotations, "\n    "))
		}
		b.WriteString("spec:\n")
		if rng.IntN(8) == 0 {
			fmt.Fprintf(&b, "  nodeSelector:\n    pool: %q\n", []string{"a", "b"}[rng.IntN(2)])
		}
		if rng.IntN(4) == 0 {
			b.WriteString("  tolerations:\n  - key: dedicated\n    operator: Exists\n    effect: NoSchedule\n")
		}
		if rng.IntN(10) == 0 {
			b.WriteString(randomNodeAffinity(rng))
		}
		b.WriteString("  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.10\n    resources:\n")
		requests := ""
		if rng.IntN(4) > 0 {
			requests += fmt.Sprintf("        cpu: %q\n", []string{"500m", "1", "2", "4", "8", "16", "24"}[rng.IntN(7)])
		}
		if rng.IntN(3) > 0 {
			requests += fmt.Sprintf("        memory: %s\n", []string{"512Mi", "4Gi", "16Gi", "64Gi"}[rng.IntN(4)])
		}
		if requests != "" {
			b.WriteString("      requests:\n" + requests)
		}
		b.WriteString(limits)
	}
	return b.String()
}

// TestFragmentationAgrees: the simulator, what-if and gpuview (`kubectl
// gpusched nodes`, the dashboard) report the same fragmentation for the
// same cluster. The simulator places a synthetic workload (replay arrival,
// no departures) and reports the cluster's fragmentation after each event;
// the same pods, bound where it put them (those it failed pending), are the
// live cluster what-if and gpuview measure. All three weigh the workload's
// typical pods (every pod: the pending ones are in the workload too).
//
// The last pod is one whole GPU, which moves the arrived workload by
// 1000 / the cluster's milli-GPU, more than one point of the curve's
// buckets: the last point of the curve is that one event, the
// fragmentation of the final cluster in % of capacity, rounded to 2
// decimals.
func TestFragmentationAgrees(t *testing.T) {
	for seed := range uint64(4) {
		nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 12, Load: 1.1, Seed: seed})
		last := pods[len(pods)-1]
		pods = append(pods, trace.Pod{Pod: trace.NewPod("last", 4000, 8192, 1, 1000, nil), Created: last.Created + 1, HasTimes: true})
		for i := range pods {
			pods[i].Deleted = trace.NeverDeleted
		}
		capacity := trace.CapacityMilli(nodes)
		if 100*1000 <= capacity {
			t.Fatalf("seed %d: %d milli-GPU of capacity: one GPU is less than a point of the curve", seed, capacity)
		}
		profiles, err := simulator.ProfilesFor(mustConfig(t), []string{simulator.DefaultPolicy})
		if err != nil {
			t.Fatal(err)
		}
		runs, err := simulator.Simulate(context.Background(), simulator.Options{Nodes: nodes, Pods: pods, Profiles: profiles,
			Seeds: []int64{int64(seed)}, Arrival: trace.ArrivalReplay, RecordPlacements: true})
		if err != nil {
			t.Fatal(err)
		}
		run := runs[0]
		if run.Failed == 0 || run.Placed == 0 {
			t.Fatalf("seed %d: %d placed, %d failed: want a cluster that is full", seed, run.Placed, run.Failed)
		}
		simulated := run.Curve[len(run.Curve)-1]
		if simulated.Events != 1 {
			t.Fatalf("seed %d: the curve's last point holds %d events, want the last pod's alone", seed, simulated.Events)
		}

		newPods := make([]*v1.Pod, len(pods))
		for i := range pods {
			newPods[i] = pods[i].Pod
		}
		cluster := boundPods(t, newPods, run.Placements)
		view := gpuview.Build(nodes, cluster, gpuview.Options{})
		results, err := whatif.Run(whatif.Input{Nodes: nodes, Pods: cluster}, whatif.Options{Policies: []string{simulator.DefaultPolicy}})
		if err != nil {
			t.Fatal(err)
		}
		pct := func(milli float64) float64 { return math.RoundToEven(100*100*milli/float64(capacity)) / 100 }
		viewPct, whatifPct := pct(view.Cluster.FragmentedMilli), pct(results[0].Summary.FragmentedMilliBefore)
		if simulated.FragmentedPct != viewPct || simulated.FragmentedPct != whatifPct {
			t.Errorf("seed %d: fragmented %% of capacity: simulator %.2f, gpuview %.2f, what-if %.2f; want one number",
				seed, simulated.FragmentedPct, viewPct, whatifPct)
		}
		if simulated.FragmentedPct == 0 {
			t.Errorf("seed %d: no fragmentation: the cluster does not exercise the typical pods", seed)
		}
	}
}

func mustConfig(t *testing.T) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	cfg, err := simulator.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
