package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// draNodeLabel marks the nodes whose GPUs NVIDIA's DRA driver publishes.
const draNodeLabel = "gpusched.io/test-dra"

// TestDRAMixedCluster runs one cluster with both kinds of GPU node: two
// whose GPUs are DRA devices (NVIDIA-shaped ResourceSlices, a DeviceClass
// that maps nvidia.com/gpu, no allocatable nvidia.com/gpu) and one with the
// device plugin (GFD labels, allocatable nvidia.com/gpu), and one that
// publishes both ways, whose GPUs gpusched leaves to DRA. Pods ask for
// plain nvidia.com/gpu (the scheduler's DynamicResources plugin creates
// and allocates their extended-resource claims), for pre-created
// ResourceClaims, for claims from a ResourceClaimTemplate (created by the
// real resourceclaim controller), or for shares by annotation, which only
// the device-plugin node may take. The scheduler is restarted mid-run. Every
// pod must be bound, every claim allocated, and no GPU given twice, across
// claims and annotations.
func TestDRAMixedCluster(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	for _, name := range []string{"dra-0", "dra-1"} {
		testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode(name).Label(draNodeLabel, "true").Obj())
		createDRAObject(t, func() error {
			_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, nvidiaSlice(name, 4), metav1.CreateOptions{})
			return err
		})
	}
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("dp-0").GFD(a100, 4, 81920).Obj())
	// Publishes both ways: gpusched leaves its GPUs to DRA (docs/dra.md).
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("dual-0").GFD(h100, 2, 81559).Obj())
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, nvidiaSlice("dual-0", 2), metav1.CreateOptions{})
		return err
	})
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, nvidiaGPUClass(), metav1.CreateOptions{})
		return err
	})

	onDRA := func(p *v1.Pod) *v1.Pod {
		p.Spec.NodeSelector = map[string]string{draNodeLabel: "true"}
		return p
	}
	c.StartResourceClaimController(ctx, t)
	createClaimTemplate(ctx, t, c, "one-gpu", 1)
	first := startGPUSched(ctx, t, c)
	createClaim(ctx, t, c, "claim-0", 1)
	before := []*v1.Pod{
		onDRA(gt.MakeGPUPod("plain-0").GPUs(1).Obj()),
		onDRA(gt.MakeGPUPod("plain-1").GPUs(2).Obj()),
		withClaim(gt.MakeGPUPod("claimed-0").Obj(), "claim-0"),
		withClaimTemplate(gt.MakeGPUPod("templated-0").Obj(), "one-gpu"),
		gt.MakeGPUPod("share-0").Milli(500).Obj(),
		gt.MakeGPUPod("share-1").Milli(300).Obj(),
	}
	for _, p := range before {
		createPod(ctx, t, c, p)
	}
	waitBound(ctx, t, c, before)
	first.Stop()

	// Created while no scheduler runs: the new one must rebuild who holds
	// what from the claims' allocations and the pods' annotations.
	createClaim(ctx, t, c, "claim-1", 1)
	after := []*v1.Pod{
		onDRA(gt.MakeGPUPod("plain-2").GPUs(2).Obj()),
		gt.MakeGPUPod("plain-any").GPUs(1).Obj(), // a DRA node or the device-plugin node
		withClaim(gt.MakeGPUPod("claimed-1").Obj(), "claim-1"),
		withClaimTemplate(gt.MakeGPUPod("templated-1").Obj(), "one-gpu"),
		gt.MakeGPUPod("share-2").Milli(400).Obj(),
		gt.MakeGPUPod("share-3").Milli(600).Obj(),
	}
	for _, p := range after {
		createPod(ctx, t, c, p)
	}
	startGPUSched(ctx, t, c)
	waitBound(ctx, t, c, append(before, after...))

	held := assertDRAPlacement(ctx, t, c)
	// plain-0, plain-1, claimed-0, templated-0, plain-2, claimed-1,
	// templated-1, and plain-any unless it went to the device-plugin node.
	anywhere, err := c.Client.CoreV1().Pods("default").Get(ctx, "plain-any", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 2 + 1 + 1 + 2 + 1 + 1 + boolInt(anywhere.Spec.NodeName != "dp-0"); held != want {
		t.Errorf("%d DRA devices allocated, want %d", held, want)
	}
	assertNoGPUGivenTwice(ctx, t, c)
	waitNodeEvent(ctx, t, c, "dual-0", "GPUsPublishedTwice")
}

// waitNodeEvent waits for an event with reason about node.
func waitNodeEvent(ctx context.Context, t *testing.T, c *testcluster.Cluster, node, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == reason && e.Regarding.Kind == "Node" && e.Regarding.Name == node {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event on node %s: %v", reason, node, err)
	}
}

// nvidiaSlice is the ResourceSlice NVIDIA's driver publishes for a node
// with count H100s, each under its own PCIe root.
func nvidiaSlice(node string, count int) *resourceapi.ResourceSlice {
	w := gt.MakeNVIDIASlice("00000-gpu.nvidia.com-"+node, node)
	for i := range count {
		w.GPU(i, fmt.Sprintf("GPU-%s-%d", node, i), "NVIDIA H100 80GB HBM3", 81559, fmt.Sprintf("pci0000:%02x", 0x17+0x12*i))
	}
	return w.Obj()
}

// nvidiaGPUClass is NVIDIA's gpu.nvidia.com DeviceClass as its chart renders
// it for resource.k8s.io/v1: whole GPUs, serving nvidia.com/gpu.
func nvidiaGPUClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: gpu.DefaultDRADriver},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}},
			ExtendedResourceName: ptr.To(string(gpu.ResourceGPU)),
		},
	}
}

// createDRAObject creates an object of resource.k8s.io, retrying while the
// API server's discovery of the group settles.
func createDRAObject(t *testing.T, create func() error) {
	t.Helper()
	var err error
	for range 50 {
		if err = create(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(err)
}

// createClaim creates a ResourceClaim for count whole GPUs of gpu.nvidia.com.
func createClaim(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, count int64) {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       wholeGPUClaimSpec(count),
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
		return err
	})
}

// createClaimTemplate creates a ResourceClaimTemplate for count whole GPUs
// of gpu.nvidia.com.
func createClaimTemplate(ctx context.Context, t *testing.T, c *testcluster.Cluster, name string, count int64) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: wholeGPUClaimSpec(count)},
	}
	createDRAObject(t, func() error {
		_, err := c.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{})
		return err
	})
}

// wholeGPUClaimSpec asks for count whole GPUs of NVIDIA's class.
func wholeGPUClaimSpec(count int64) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: gpu.DefaultDRADriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
	}}}}
}

// withClaimTemplate makes the pod's container use a claim created from the
// named ResourceClaimTemplate.
func withClaimTemplate(pod *v1.Pod, template string) *v1.Pod {
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// withClaim makes the pod's container use the named ResourceClaim.
func withClaim(pod *v1.Pod, claim string) *v1.Pod {
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// waitBound waits for every pod to be bound.
func waitBound(ctx context.Context, t *testing.T, c *testcluster.Cluster, pods []*v1.Pod) {
	t.Helper()
	for _, p := range pods {
		testcluster.WaitForPodScheduled(ctx, t, c.Client, p.Namespace, p.Name, timeout)
	}
}

// assertDRAPlacement checks every bound pod against the DRA objects and
// returns how many devices the claims hold:
//   - every claim is allocated, on devices of the node its pod is bound to
//     (the driver's pool is named after the node);
//   - no device is in two claims unless both allocations are shares of it
//     (consumable capacity), and the memory its shares consume together
//     fits its capacity;
//   - a pod on a DRA node holds its GPUs through a claim and carries no
//     gpusched.io/gpu-assigned annotation; a pod with an annotation is on a
//     node that publishes no slices.
func assertDRAPlacement(ctx context.Context, t *testing.T, c *testcluster.Cluster) int {
	t.Helper()
	// Claim status is written in PreBind, before binding; wait for the
	// informer-free API view to show every claim allocated.
	var claims *resourceapi.ResourceClaimList
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		claims, err = c.Client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range claims.Items {
			if claims.Items[i].Status.Allocation == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("claims not all allocated: %v", err)
	}
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := deviceMemory(ctx, t, c)
	nodeOf := map[string]string{} // pod name → node
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
	}
	holder := map[string]string{}     // device → claim holding it whole
	sharedBy := map[string][]string{} // device → claims holding shares of it
	consumed := map[string]int64{}    // device → bytes its shares consume
	claimOf := map[string]bool{}      // claims by name
	for _, claim := range claims.Items {
		claimOf[claim.Name] = true
		var node string
		for _, r := range claim.Status.ReservedFor {
			node = nodeOf[r.Name]
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			dev := r.Driver + "/" + r.Pool + "/" + r.Device
			if r.ShareID != nil {
				sharedBy[dev] = append(sharedBy[dev], claim.Name)
				if q, ok := r.ConsumedCapacity["memory"]; ok {
					consumed[dev] += q.Value()
				}
			} else {
				if other, taken := holder[dev]; taken {
					t.Errorf("device %s allocated to claims %s and %s", dev, other, claim.Name)
				}
				holder[dev] = claim.Name
			}
			if r.Pool != node {
				t.Errorf("claim %s: device %s is not on node %q of its pod", claim.Name, dev, node)
			}
		}
	}
	for dev, shares := range sharedBy {
		if whole, taken := holder[dev]; taken {
			t.Errorf("device %s allocated whole to claim %s and shared by claims %v", dev, whole, shares)
		}
		if consumed[dev] > capacity[dev] {
			t.Errorf("device %s: claims %v consume %d bytes of memory, it has %d", dev, shares, consumed[dev], capacity[dev])
		}
	}
	for _, p := range pods.Items {
		_, annotated := p.Annotations[gpu.AnnotationAssigned]
		onDRANode := p.Spec.NodeName != "dp-0"
		switch {
		case annotated && onDRANode:
			t.Errorf("pod %s on DRA node %s has a gpusched assignment %q", p.Name, p.Spec.NodeName, p.Annotations[gpu.AnnotationAssigned])
		case !annotated && !onDRANode && len(p.Spec.ResourceClaims) == 0:
			t.Errorf("pod %s on the device-plugin node has no gpusched assignment", p.Name)
		case onDRANode && len(p.Spec.ResourceClaims) == 0:
			s := p.Status.ExtendedResourceClaimStatus
			if s == nil || !claimOf[s.ResourceClaimName] {
				t.Errorf("pod %s on DRA node %s holds no extended-resource claim: %+v", p.Name, p.Spec.NodeName, s)
			}
		}
	}
	return len(holder) + len(sharedBy)
}

// deviceMemory is the memory capacity, in bytes, of every device the
// cluster's ResourceSlices publish, by driver/pool/device.
func deviceMemory(ctx context.Context, t *testing.T, c *testcluster.Cluster) map[string]int64 {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			mem := d.Capacity["memory"]
			out[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = mem.Value.Value()
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
