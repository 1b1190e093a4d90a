package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestDashboardShowsDRAGPUs: node dra publishes 4 H100s through NVIDIA's
// DRA driver and no GPU labels; claim train-gpu holds gpu-0 for pod train.
// The dashboard's snapshot shows the node's 4 GPUs, gpu-0 allocated
// (1000 of 4000 milli-GPU) and held by train.
func TestDashboardShowsDRAGPUs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slice := gt.MakeNVIDIASlice("dra-slice", "dra")
	for i := range 4 {
		slice.GPU(i, "GPU-dra-"+string(rune('0'+i)), "NVIDIA H100 80GB HBM3", 81559, "")
	}
	pod := gt.MakeGPUPod("train").UID("train").Node("dra").Obj()
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("train-gpu")}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "train-gpu", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpu.DefaultDRADriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "gpu", Driver: gpu.DefaultDRADriver, Pool: "dra", Device: "gpu-0"}}},
				NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"dra"}}}}}},
			},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train", UID: "train"}},
		},
	}
	srv, stop := runDashboard(ctx, t, fake.NewClientset(gt.MakeGPUNode("dra").Obj(), pod, slice.Obj(), claim))
	defer stop()

	var w Wire
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, raw := get(t, srv, "/api/snapshot")
		if err := json.Unmarshal(raw, &w); err != nil {
			return false, nil // not published yet
		}
		return len(w.Nodes) > 0, nil
	})
	if err != nil {
		t.Fatalf("no snapshot with a node: %v", err)
	}
	if len(w.Nodes) != 1 || w.Nodes[0].Name != "dra" || len(w.Nodes[0].Alloc) != 4 || w.Nodes[0].Alloc[0] != 1000 || w.Cluster.AllocatedMilli != 1000 {
		t.Fatalf("snapshot nodes %+v, cluster %+v; want dra's 4 GPUs with gpu-0 allocated (1000 of 4000)", w.Nodes, w.Cluster)
	}
	_, raw := get(t, srv, "/api/node?name=dra")
	var n struct {
		GPUs []struct {
			Holders []struct{ Name string } `json:"holders"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(raw, &n); err != nil || len(n.GPUs) != 4 || len(n.GPUs[0].Holders) != 1 || n.GPUs[0].Holders[0].Name != "train" {
		t.Errorf("/api/node?name=dra: %s (%v); want gpu-0 held by train", raw, err)
	}
}

// TestDashboardWithoutDRAAccess: where the dashboard may not list
// ResourceClaims (or the API server serves no resource.k8s.io), it runs
// as without DRA: the snapshot has the labelled node's GPUs.
func TestDashboardWithoutDRAAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := fake.NewClientset(gt.MakeGPUNode("dp").GFD("A100", 4, 81920).Obj())
	client.PrependReactor("list", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(resourceapi.Resource("resourceclaims"), "", errors.New("no access"))
	})
	srv, stop := runDashboard(ctx, t, client)
	var w Wire
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, raw := get(t, srv, "/api/snapshot")
		return json.Unmarshal(raw, &w) == nil && len(w.Nodes) > 0, nil
	})
	if err != nil || w.Cluster.GPUs != 4 {
		t.Errorf("snapshot %+v (%v), want dp's 4 GPUs", w.Cluster, err)
	}
	stop()

	// Any other error listing them stops Run with it.
	client = fake.NewClientset()
	client.PrependReactor("list", "deviceclasses", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("starting")
	})
	if err := New(client, Options{}).Run(ctx); err == nil || !strings.Contains(err.Error(), "deviceclasses") {
		t.Errorf("Run with deviceclasses unavailable: %v, want an error naming them", err)
	}
}
