package gpuresourcesfit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// handle is the part of a framework handle NodeResourcesFit reads: no DRA
// manager (no DeviceClass maps an extended resource to DRA).
type handle struct{ fwk.Handle }

func (handle) SharedDRAManager() fwk.SharedDRAManager { return nil }

const fpga v1.ResourceName = "example.com/fpga"

// TestDecidesAsNodeResourcesFit runs GPUResourcesFit and NodeResourcesFit
// with ignoredResources [nvidia.com/gpu, gpusched.io/gpu-milli,
// gpusched.io/gpu-memory-mib] (as the gpusched profiles configure it) on random nodes, their pods and a pending pod each, and
// requires the same status: code and every reason. The pods mix
// CPU, memory, ephemeral storage, GPUs, shares as resources (which no node
// advertises), another extended resource and
// hugepages, in containers, init and sidecar containers, pod-level
// resources and overhead; the nodes are full enough that every resource is
// at times the one missing.
func TestDecidesAsNodeResourcesFit(t *testing.T) {
	ctx := context.Background()
	for _, podLevel := range []bool{false, true} {
		fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
		fts.EnablePodLevelResources = podLevel
		ours, err := newWithFeatures(ctx, handle{}, fts)
		if err != nil {
			t.Fatal(err)
		}
		upstream, err := noderesources.NewFit(ctx, &schedconfig.NodeResourcesFitArgs{
			// As the shipped profiles configure NodeResourcesFit.
			IgnoredResources: []string{"nvidia.com/gpu", "gpusched.io/gpu-milli", "gpusched.io/gpu-memory-mib"},
			ScoringStrategy: &schedconfig.ScoringStrategy{Type: schedconfig.LeastAllocated, Resources: []schedconfig.ResourceSpec{
				{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}},
		}, handle{}, fts)
		if err != nil {
			t.Fatal(err)
		}
		reference := upstream.(fitPlugin)

		rng := rand.New(rand.NewPCG(7, uint64(len(fmt.Sprint(podLevel)))))
		outcomes := map[string]int{}
		for i := range 4000 {
			node := randomNode(rng)
			var pods []fwk.PodInfo
			for j := range rng.IntN(4) {
				p := randomPod(rng, fmt.Sprintf("bound-%d-%d", i, j), podLevel)
				p.Spec.NodeName = node.Name
				pi, err := framework.NewPodInfo(p)
				if err != nil {
					t.Fatal(err)
				}
				pods = append(pods, pi)
			}
			ni := framework.NewNodeInfo()
			ni.SetNode(node)
			for _, pi := range pods {
				ni.AddPodInfo(pi)
			}
			pod := randomPod(rng, fmt.Sprintf("pending-%d", i), podLevel)

			want := run(ctx, reference, pod, ni)
			got := run(ctx, ours, pod, ni)
			if got.Code() != want.Code() || !slices.Equal(reasons(got), reasons(want)) {
				t.Fatalf("case %d (pod-level resources %v): GPUResourcesFit says %v %q, NodeResourcesFit %v %q\nnode %v\npod %+v",
					i, podLevel, got.Code(), reasons(got), want.Code(), reasons(want), node.Status.Allocatable, pod.Spec)
			}
			if want.IsSuccess() {
				outcomes["fits"]++
			}
			for _, r := range reasons(want) {
				outcomes[r]++
			}
		}
		// The cases must reach both answers and each resource's reason, or
		// the comparison proves little.
		for _, must := range []string{"fits", "Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage",
			"Insufficient example.com/fpga", "Insufficient hugepages-2Mi", "Too many pods"} {
			if outcomes[must] == 0 {
				t.Errorf("pod-level resources %v: no case ended in %q; outcomes: %v", podLevel, must, outcomes)
			}
		}
		for _, ignored := range []string{"nvidia.com/gpu", "gpusched.io/gpu-milli", "gpusched.io/gpu-memory-mib"} {
			if outcomes["Insufficient "+ignored] > 0 {
				t.Errorf("NodeResourcesFit checked the ignored %s: %v", ignored, outcomes)
			}
		}
	}
}

// TestAdvertisedShares: on a node whose kubelet advertises
// gpusched.io/gpu-milli, a share asked for as that resource must fit the
// allocatable beside the node's pods, as the kubelet checks it; on a node
// that does not advertise it, and for a share by annotation, only
// NodeResourcesFit's checks apply (GPUPlacement accounts the GPUs).
func TestAdvertisedShares(t *testing.T) {
	ctx := context.Background()
	p, err := newWithFeatures(ctx, handle{}, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		t.Fatal(err)
	}
	share := func(name string, milli string) *v1.Pod {
		pod := randomPodWith(map[v1.ResourceName]string{"cpu": "100m", gpu.ResourceMilli: milli})
		pod.Name, pod.UID = name, types.UID(name)
		return pod
	}
	node := func(advertised string) fwk.NodeInfo {
		alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}
		if advertised != "" {
			alloc[gpu.ResourceMilli] = resource.MustParse(advertised)
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Allocatable: alloc}})
		bound := share("bound", "750")
		bound.Spec.NodeName = "n"
		pi, err := framework.NewPodInfo(bound)
		if err != nil {
			t.Fatal(err)
		}
		ni.AddPodInfo(pi)
		return ni
	}
	byAnnotation := randomPodWith(map[v1.ResourceName]string{"cpu": "100m"})
	byAnnotation.Annotations = map[string]string{gpu.AnnotationMilli: "500"}
	for _, tc := range []struct {
		name       string
		advertised string
		pod        *v1.Pod
		want       []string
	}{
		// 750 bound + 500 = 1250 > 1000.
		{"past the allocatable", "1000", share("p", "500"), []string{"Insufficient gpusched.io/gpu-milli"}},
		// 750 + 250 = 1000.
		{"exactly the allocatable", "1000", share("p", "250"), nil},
		// The agent's plugin restarting: allocatable 0.
		{"while the plugin is away", "0", share("p", "1"), []string{"Insufficient gpusched.io/gpu-milli"}},
		{"a node that does not advertise", "", share("p", "500"), nil},
		{"a share by annotation", "0", byAnnotation, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reasons(run(ctx, p, tc.pod, node(tc.advertised))); !slices.Equal(got, tc.want) {
				t.Errorf("reasons %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTakesNoArgs: args are refused, saying what GPUResourcesFit ignores;
// none are taken (noargs.Check's own test covers the forms).
func TestTakesNoArgs(t *testing.T) {
	ctx := context.Background()
	if _, err := New(ctx, nil, handle{}); err != nil {
		t.Errorf("New(nil): %v", err)
	}
	_, err := New(ctx, &runtime.Unknown{Raw: []byte(`{"ignoredResources":["example.com/fpga"]}`)}, handle{})
	if err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu") {
		t.Errorf("args were taken, or refused without saying what is ignored: %v", err)
	}
}

// A pod without GPUs is not copied; one with GPUs loses them everywhere.
func TestWithoutIgnored(t *testing.T) {
	plain := randomPodWith(map[v1.ResourceName]string{"cpu": "1"})
	if withoutIgnored(plain) != plain {
		t.Error("a pod without GPUs was copied")
	}
	gpus := randomPodWith(map[v1.ResourceName]string{"cpu": "1", "nvidia.com/gpu": "2"})
	gpus.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}
	gpus.Spec.Overhead = v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	out := withoutIgnored(gpus)
	if asksFor(out) {
		t.Errorf("the copy still asks for GPUs: %+v", out.Spec)
	}
	if !asksFor(gpus) {
		t.Error("the pod itself was changed")
	}
	if got := out.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "1" {
		t.Errorf("the copy's CPU request is %s, want 1", got)
	}
}

// reasons are a status's reasons, sorted (NodeResourcesFit lists the
// extended resources' in map order, which varies from call to call); none
// for success (a nil status).
func reasons(s *fwk.Status) []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(slices.Values(s.Reasons()))
}

func run(ctx context.Context, p fitPlugin, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	state := framework.NewCycleState()
	if _, s := p.PreFilter(ctx, state, pod, []fwk.NodeInfo{ni}); !s.IsSuccess() {
		return s
	}
	return p.Filter(ctx, state, pod, ni)
}

func randomNode(rng *rand.Rand) *v1.Node {
	q := func(format string, v int) resource.Quantity { return resource.MustParse(fmt.Sprintf(format, v)) }
	alloc := v1.ResourceList{
		v1.ResourceCPU:    q("%dm", 500+rng.IntN(8000)),
		v1.ResourceMemory: q("%dMi", 512+rng.IntN(16384)),
		v1.ResourcePods:   q("%d", 1+rng.IntN(5)),
	}
	if rng.IntN(3) > 0 {
		alloc[v1.ResourceEphemeralStorage] = q("%dMi", rng.IntN(4096))
	}
	if rng.IntN(3) > 0 {
		alloc["nvidia.com/gpu"] = q("%d", rng.IntN(9))
	}
	if rng.IntN(2) > 0 {
		alloc[fpga] = q("%d", rng.IntN(3))
	}
	if rng.IntN(3) == 0 {
		alloc["hugepages-2Mi"] = q("%dMi", 2*rng.IntN(512))
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
}

// randomPod asks, in 1–3 containers, an init container and a sidecar at
// times, for random amounts of each resource; at times with pod-level
// resources and an overhead.
func randomPod(rng *rand.Rand, name string, podLevel bool) *v1.Pod {
	res := func() v1.ResourceRequirements {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
		// maybe asks for n at times; an extended resource or hugepages
		// with its limit equal to its request, as the API server defaults
		// and requires them, the others with a limit at times.
		maybe := func(n v1.ResourceName, format string, max int, extended bool) {
			if rng.IntN(3) > 0 {
				return
			}
			v := resource.MustParse(fmt.Sprintf(format, rng.IntN(max)))
			r.Requests[n] = v
			if extended || rng.IntN(2) == 0 {
				r.Limits[n] = v
			}
		}
		maybe(v1.ResourceCPU, "%dm", 3000, false)
		maybe(v1.ResourceMemory, "%dMi", 6000, false)
		maybe(v1.ResourceEphemeralStorage, "%dMi", 2000, false)
		maybe("nvidia.com/gpu", "%d", 5, true)
		maybe(fpga, "%d", 3, true)
		maybe("gpusched.io/gpu-milli", "%d", 999, true)
		maybe("gpusched.io/gpu-memory-mib", "%d", 40000, true)
		maybe("hugepages-2Mi", "%dMi", 2*rng.IntN(300)+2, true)
		return r
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
	for c := range 1 + rng.IntN(3) {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: fmt.Sprint("c", c), Resources: res()})
	}
	if rng.IntN(4) == 0 {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: "init", Resources: res()})
	}
	if rng.IntN(4) == 0 {
		always := v1.ContainerRestartPolicyAlways
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: "sidecar", RestartPolicy: &always, Resources: res()})
	}
	if rng.IntN(5) == 0 {
		pod.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), "nvidia.com/gpu": resource.MustParse("1")}
	}
	if podLevel && rng.IntN(3) == 0 {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(fmt.Sprintf("%dm", 100+rng.IntN(5000)))}}
		pod.Spec.Resources = &r
	}
	return pod
}

func randomPodWith(requests map[v1.ResourceName]string) *v1.Pod {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for n, v := range requests {
		r.Requests[n] = resource.MustParse(v)
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: r}}}}
}
