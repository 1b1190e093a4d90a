package extender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// watchingDRA is a cluster view over client that watches DRA, synced;
// its informers stop with ctx and the test.
func watchingDRA(ctx context.Context, t *testing.T, client *fake.Clientset) *Cluster {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster, err := NewCluster(factory)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.WatchDRA(factory, gpu.DefaultDRADriver); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), cluster.HasSynced) {
		t.Fatal("informers did not sync")
	}
	return cluster
}

// allocatedOn is a claim allocated one device of driver on node.
func allocatedOn(name, node, driver string, adminAccess bool) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-claim-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: driver, Pool: node, Device: "gpu-0", AdminAccess: ptr.To(adminAccess)}}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}},
		}},
	}
}

// TestDRANodesGetNoGPUs tries to have the extender give a GPU that a DRA
// driver also hands out, on a node that publishes its GPUs both ways (GFD
// labels and allocatable nvidia.com/gpu for the device plugin, a
// ResourceSlice of gpu.nvidia.com for DRA). The extender refuses GPU pods
// there, unresolvably with the reason GPUPlacement gives, in Filter and in
// Bind (a scheduler that skipped Filter, or a slice published between
// Filter and Bind); it keeps refusing while the driver's slices are gone
// but an allocated claim still holds the node's devices (a driver
// upgrade), and takes the node back once neither is there. Another
// driver's slice and a claim with admin access (monitoring) hold nothing.
func TestDRANodesGetNoGPUs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	both := gt.MakeGPUNode("both").GFD(a100, 4, 81920).Obj()
	plain := gt.MakeGPUNode("plain").GFD(a100, 4, 81920).Obj()
	nicNode := gt.MakeGPUNode("nic").GFD(a100, 4, 81920).Obj()
	slice := gt.MakeNVIDIASlice("gpu.nvidia.com-both", "both").GPU(0, "GPU-both-0", "NVIDIA A100-SXM4-80GB", 81920, "").Obj()
	nicSlice := gt.MakeNVIDIASlice("nic.example.com-nic", "nic").GPU(0, "GPU-nic-0", "NVIDIA A100-SXM4-80GB", 81920, "").Obj()
	nicSlice.Spec.Driver = "nic.example.com"
	pod := gt.MakeGPUPod("p").GPUs(1).SchedulerName(v1.DefaultSchedulerName).Obj()
	client := fake.NewClientset(both, plain, nicNode, slice, nicSlice, pod)
	client.PrependReactor("create", "pods", bindReactor(client.Tracker()))
	cluster := watchingDRA(ctx, t, client)
	ext := New(cluster, client, gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{}))
	names := []string{"both", "plain", "nic"}

	refused := func(want bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return cluster.DRAManaged("both") == want, nil
		})
		if err != nil {
			t.Fatalf("DRAManaged(both) is not %t", want)
		}
		got := ext.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		reason, isRefused := got.FailedAndUnresolvableNodes["both"]
		if isRefused != want || (want && reason != gpu.ReasonDRAManaged.String()) {
			t.Errorf("Filter on both: refused %t (%q), want refused %t with %q", isRefused, reason, want, gpu.ReasonDRAManaged)
		}
		if len(got.FailedNodes)+len(got.FailedAndUnresolvableNodes) != boolCount(want) {
			t.Errorf("Filter: failed %v, unresolvable %v; want only both refused (%t)", got.FailedNodes, got.FailedAndUnresolvableNodes, want)
		}
		prio := ext.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		if want && prio[0].Score != 0 {
			t.Errorf("Prioritize scored both %d, want 0", prio[0].Score)
		}
	}
	refused(true)
	if got := ext.Bind(ctx, &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "both"}); !strings.Contains(got.Error, gpu.ReasonDRAManaged.String()) {
		t.Errorf("Bind onto both: %q, want it refused with %q", got.Error, gpu.ReasonDRAManaged)
	}

	// A driver upgrade: the slice goes, an allocated claim stays.
	claims := client.ResourceV1().ResourceClaims("default")
	if _, err := claims.Create(ctx, allocatedOn("held", "both", gpu.DefaultDRADriver, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Create(ctx, allocatedOn("monitor", "plain", gpu.DefaultDRADriver, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Once the informers have delivered the slice's deletion and the held
	// claim, only the claim holds the node: no slice of the driver is left
	// (nic's is another driver's, never counted), and the monitoring claim,
	// with admin access, holds nothing.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		cluster.dra.mu.RLock()
		defer cluster.dra.mu.RUnlock()
		return len(cluster.dra.slices) == 0 && len(cluster.dra.claims) == 1, nil
	})
	if err != nil {
		cluster.dra.mu.RLock()
		defer cluster.dra.mu.RUnlock()
		t.Fatalf("slices %v, claims %v; want no slice of the driver and the held claim", cluster.dra.slices, cluster.dra.claims)
	}
	refused(true)

	// The claim is deallocated: the node is the device plugin's again.
	if err := claims.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refused(false)
	if got := ext.Bind(ctx, &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "both"}); got.Error != "" {
		t.Errorf("Bind onto both without DRA: %q", got.Error)
	}
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestServesDRA: the extender watches DRA only where the API server serves
// it; a server without resource.k8s.io/v1 has no DRA nodes.
func TestServesDRA(t *testing.T) {
	d := &fakediscovery.FakeDiscovery{Fake: &fake.NewClientset().Fake}
	if served, err := servesDRA(d); served || err != nil {
		t.Errorf("without resource.k8s.io/v1: %t, %v; want false, nil", served, err)
	}
	// A 1.33 API server with beta DRA: the extender cannot see DRA nodes.
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "resourceclaims"}}}}
	if served, err := servesDRA(d); served || err == nil || !strings.Contains(err.Error(), "serves resource.k8s.io only as v1beta2, not v1") {
		t.Errorf("with resource.k8s.io/v1beta2 only: %t, %v; want an error naming the versions", served, err)
	}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}}
	if served, err := servesDRA(d); served || err == nil {
		t.Errorf("resource.k8s.io/v1 without resourceclaims: %t, %v; want an error", served, err)
	}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "resourceclaims"}}}}
	if served, err := servesDRA(d); !served || err != nil {
		t.Errorf("with resource.k8s.io/v1: %t, %v; want true, nil", served, err)
	}
}

// TestDRANodesCounted: a node is DRA's while any slice of the driver
// (with devices or not) or any allocated claim of the driver names it, and
// a slice or claim that moves moves the node with it.
func TestDRANodesCounted(t *testing.T) {
	d := newDRANodes(gpu.DefaultDRADriver)
	slice := func(name, node, driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}}}
	}
	d.onSlice(slice("s1", "a", gpu.DefaultDRADriver)) // no devices: still DRA's
	d.onSlice(slice("s2", "a", gpu.DefaultDRADriver))
	d.onSlice(slice("n1", "b", "nic.example.com"))
	d.onClaim(allocatedOn("c1", "c", gpu.DefaultDRADriver, false))
	d.onClaim(allocatedOn("m1", "b", gpu.DefaultDRADriver, true)) // admin access holds nothing
	check := func(step string, want map[string]bool) {
		t.Helper()
		for node, w := range want {
			if d.has(node) != w {
				t.Errorf("%s: node %s DRA's %t, want %t", step, node, !w, w)
			}
		}
	}
	check("start", map[string]bool{"a": true, "b": false, "c": true})
	d.onSliceDelete(slice("s1", "a", gpu.DefaultDRADriver))
	check("one of a's two slices deleted", map[string]bool{"a": true})
	d.onSlice(slice("s2", "b", gpu.DefaultDRADriver))
	check("a's last slice moved to b", map[string]bool{"a": false, "b": true})
	d.onClaimDelete(cache.DeletedFinalStateUnknown{Key: "default/c1", Obj: allocatedOn("c1", "c", gpu.DefaultDRADriver, false)})
	check("c's claim deleted (a missed deletion)", map[string]bool{"c": false})
}

// TestMaximaCountDRAGPUs: the cluster's most GPUs, which host-aware
// policies normalize by, count the GPUs a DRA driver publishes on a node,
// as GPUPlacement counts them (gpu.Maxima): a node whose slice publishes 8
// GPUs raises the maxima over the 4-GPU annotation node, and the maxima
// follow the slice as it shrinks and goes. Another driver's devices count
// nothing.
func TestMaximaCountDRAGPUs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gpus := func(name, node string, n int) *resourceapi.ResourceSlice {
		w := gt.MakeNVIDIASlice(name, node)
		for i := range n {
			w = w.GPU(i, fmt.Sprintf("GPU-%s-%d", node, i), "NVIDIA H100 80GB HBM3", 81920, "")
		}
		return w.Obj()
	}
	nic := gpus("nic.example.com-other", "other", 16)
	nic.Spec.Driver = "nic.example.com"
	client := fake.NewClientset(gt.MakeGPUNode("plain").GFD(a100, 4, 81920).CPU("32").Obj(), gt.MakeGPUNode("dra").CPU("16").Obj(),
		gpus("gpu.nvidia.com-dra", "dra", 8), nic)
	cluster := watchingDRA(ctx, t, client)
	want := func(step string, gpus int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return cluster.maxima().GPUs == gpus, nil
		})
		if m := cluster.maxima(); err != nil || m.MilliCPU != 32000 {
			t.Fatalf("%s: maxima %d milli-CPU, %d GPUs; want 32000, %d", step, m.MilliCPU, m.GPUs, gpus)
		}
	}
	want("the DRA node's 8 GPUs", 8)
	slices := client.ResourceV1().ResourceSlices()
	if _, err := slices.Update(ctx, gpus("gpu.nvidia.com-dra", "dra", 2), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("the slice shrunk to 2 GPUs: the annotation node's 4", 4)
	if _, err := slices.Update(ctx, gpus("gpu.nvidia.com-dra", "dra", 6), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("grown to 6", 6)
	if err := slices.Delete(ctx, "gpu.nvidia.com-dra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("the slice deleted", 4)
}
