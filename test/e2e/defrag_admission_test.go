package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

const defragmenterServiceAccount = "system:serviceaccount:kube-system:gpusched-defragmenter"

// TestDefragmenterNodePolicy applies deploy/defragmenter/ to a real API
// server that authorizes with RBAC and uses the defragmenter's identity as
// a stolen token would: RBAC lets it update every Node, and its admission
// policy lets it change the GPU reservations annotation alone. Cordoning,
// tainting, relabelling, re-annotating, owning or finalizing a node, or
// writing its GPU inventory, is refused with the policy's message; writing
// and removing reservations on a node with many annotations is allowed
// every time (the annotations compared as sets, whatever their order).
// Another identity that may update Nodes (a node add-on, a kubelet) may
// not write reservations, which would draw pods to its node; it may remove
// them, which only frees GPUs.
func TestDefragmenterNodePolicy(t *testing.T) {
	c, kubectl := rbacCluster(t)
	ctx := context.Background()
	command(t, nil, kubectl, "--kubeconfig="+c.KubeconfigPath, "apply", "-k", "deploy/defragmenter")
	busy := gt.MakeGPUNode("gpu-0").GFD(a100, 2, 81920)
	for _, k := range []string{"kubeadm.alpha.kubernetes.io/cri-socket", "node.alpha.kubernetes.io/ttl", "volumes.kubernetes.io/controller-managed-attach-detach",
		"csi.volume.kubernetes.io/nodeid", "nfd.node.kubernetes.io/feature-labels", "cluster-autoscaler.kubernetes.io/scale-down-disabled"} {
		busy = busy.Annotation(k, "v-"+k)
	}
	testcluster.CreateNode(ctx, t, c.Client, busy.Obj())
	defrag := impersonate(t, c, defragmenterServiceAccount, "")

	soon := time.Now().Add(time.Minute).UTC()
	reserve := func(n *v1.Node) {
		n.Annotations[gpu.AnnotationReservations] = gpu.FormatReservations([]gpu.Reservation{
			{ID: "defrag-x/0", Pod: "uid-1", GPUs: "node=gpu-0;gpus=0;milli=1000;memory=0", Expires: soon}})
	}
	attacks := []struct {
		name   string
		change func(n *v1.Node)
	}{
		{"cordon", func(n *v1.Node) { n.Spec.Unschedulable = true }},
		{"taint", func(n *v1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "mine", Effect: v1.TaintEffectNoSchedule})
		}},
		{"relabel", func(n *v1.Node) { n.Labels[gpu.LabelProduct] = "NVIDIA-H100-80GB-HBM3" }},
		{"write the GPU inventory", func(n *v1.Node) { n.Annotations[gpu.AnnotationDevices] = `[{"index":0,"model":"X","memoryMiB":1}]` }},
		{"another annotation beside reservations", func(n *v1.Node) { reserve(n); n.Annotations["team"] = "mine" }},
		{"remove another annotation", func(n *v1.Node) { delete(n.Annotations, "node.alpha.kubernetes.io/ttl") }},
		{"own the node (for the garbage collector to delete it)", func(n *v1.Node) {
			n.OwnerReferences = append(n.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "gone", UID: "0000"})
		}},
		{"finalize the node", func(n *v1.Node) { n.Finalizers = append(n.Finalizers, "example.com/never") }},
	}
	// The RBAC objects and the policies take effect a moment after they
	// are created: wait until a relabelling reaches the policy (not RBAC's
	// refusal) and is refused, and a reservation written by another
	// identity too. The probes are dry runs, each with a new value, so
	// that one let through changes nothing and does not make the next a
	// no-op.
	probes := 0
	waitFor(t, "the policies refuse the defragmenter's relabelling and another's reservation", func() bool {
		probes++
		relabel := updateNodeWith(ctx, defrag, "gpu-0", func(n *v1.Node) { n.Labels["probe"] = fmt.Sprint(probes) }, dryRun)
		forged := updateNodeWith(ctx, c.Client, "gpu-0", func(n *v1.Node) { n.Annotations[gpu.AnnotationReservations] = fmt.Sprint(probes) }, dryRun)
		return apierrors.IsForbidden(relabel) && strings.Contains(relabel.Error(), "may change only the gpusched.io/gpu-reservations annotation") &&
			apierrors.IsForbidden(forged)
	})
	for _, a := range attacks {
		err := updateNode(ctx, defrag, "gpu-0", a.change)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may change only the gpusched.io/gpu-reservations annotation") {
			t.Errorf("%s as the defragmenter: %v, want Forbidden by its admission policy", a.name, err)
		}
	}
	for i := range 10 {
		if err := updateNode(ctx, defrag, "gpu-0", reserve); err != nil {
			t.Fatalf("writing a reservation as the defragmenter (%d): %v", i, err)
		}
		if err := updateNode(ctx, defrag, "gpu-0", func(n *v1.Node) { delete(n.Annotations, gpu.AnnotationReservations) }); err != nil {
			t.Fatalf("removing a reservation as the defragmenter (%d): %v", i, err)
		}
	}
	// Another identity that may update Nodes may change them as before,
	// but not their reservations.
	grantIntruder(ctx, t, c)
	intruder := impersonate(t, c, intruderServiceAccount, "")
	// The authorizer reads roles from a cache: wait until it knows the new one.
	waitFor(t, "the intruder's role takes effect", func() bool {
		_, err := intruder.CoreV1().Nodes().Get(ctx, "gpu-0", metav1.GetOptions{})
		return err == nil
	})
	if err := updateNode(ctx, intruder, "gpu-0", func(n *v1.Node) { n.Labels["team"] = "x" }); err != nil {
		t.Errorf("relabelling as another writer of Nodes: %v", err)
	}
	err := updateNode(ctx, intruder, "gpu-0", reserve)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only system:serviceaccount:kube-system:gpusched-defragmenter may set or change it") {
		t.Errorf("writing a reservation as another writer of Nodes: %v, want Forbidden naming the defragmenter", err)
	}
	// Removing the reservations only frees GPUs: anyone who may update the
	// Node may (an admin cleaning up after a defragmenter that is gone).
	if err := updateNode(ctx, defrag, "gpu-0", reserve); err != nil {
		t.Fatal(err)
	}
	if err := updateNode(ctx, intruder, "gpu-0", func(n *v1.Node) { delete(n.Annotations, gpu.AnnotationReservations) }); err != nil {
		t.Errorf("removing the reservations as another writer of Nodes: %v", err)
	}
	// The cluster admin is not bound by it.
	if err := updateNode(ctx, c.Client, "gpu-0", attacks[0].change); err != nil {
		t.Errorf("cordoning as the admin: %v", err)
	}
}

// updateNode reads the node, changes it and writes it back.
func updateNode(ctx context.Context, client kubernetes.Interface, name string, change func(*v1.Node)) error {
	return updateNodeWith(ctx, client, name, change, metav1.UpdateOptions{})
}

// dryRun is the options of an update admission sees and nothing keeps.
var dryRun = metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}

func updateNodeWith(ctx context.Context, client kubernetes.Interface, name string, change func(*v1.Node), opts metav1.UpdateOptions) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	change(n)
	_, err = client.CoreV1().Nodes().Update(ctx, n, opts)
	return err
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("%s: not within %v", what, timeout)
}
