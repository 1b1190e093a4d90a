package playground

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestShareQuota puts a ResourceQuota of two GPUs' worth of shares
// (requests.gpusched.io/gpu-milli: 2000) on a namespace, with the real
// ResourceQuota admission and controller, gpusched and the node agent:
//   - eight 250-milli pods asking for their share as the resource are
//     admitted and placed, each given 250 milli;
//   - once the quota counts them, the ninth is refused at admission with
//     quota's own message;
//   - a pod asking for the same share by annotation is admitted: the
//     annotation form is not counted (docs/quotas.md says how to forbid it);
//   - once one pod is deleted the quota controller counts it gone, and the
//     ninth is admitted and placed.
func TestShareQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := serve(ctx, t, func(f *Flags) { f.Nodes = "1xA100-80GB:4" }).client
	const ns = "team-a"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	quotaName := v1.ResourceName("requests." + string(gpu.ResourceMilli))
	quota := &v1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-shares", Namespace: ns},
		Spec:       v1.ResourceQuotaSpec{Hard: v1.ResourceList{quotaName: resource.MustParse("2000")}},
	}
	if _, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Admission refuses every pod of the namespace until the controller has
	// counted the quota.
	waitQuota(ctx, t, client, ns, quota.Name, func(q *v1.ResourceQuota) bool { _, ok := q.Status.Hard[quotaName]; return ok })

	sharePod := func(name string) *v1.Pod {
		p := demoPod(name)
		p.Namespace = ns
		p.Spec.SchedulerName = "gpusched"
		c := &p.Spec.Containers[0]
		c.Resources.Requests[gpu.ResourceMilli] = resource.MustParse("250")
		c.Resources.Limits = v1.ResourceList{gpu.ResourceMilli: resource.MustParse("250")}
		return p
	}
	for i := range 8 {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, sharePod(fmt.Sprint("share-", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %d of 8: %v", i, err)
		}
	}
	// The quota controller recounts the namespace's pods from its own cache,
	// and while that cache lags behind a burst of admissions it can write a
	// lower usage for a moment, which lets one more pod in (Kubernetes'
	// quota is eventually consistent; docs/quotas.md). Once the eight run
	// and the quota counts all of them, the ninth must be refused.
	waitShares(ctx, t, client, ns, 8)
	waitQuota(ctx, t, client, ns, quota.Name, func(q *v1.ResourceQuota) bool {
		used := q.Status.Used[quotaName]
		return used.Value() == 2000
	})
	_, err := client.CoreV1().Pods(ns).Create(ctx, sharePod("share-8"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: gpu-shares") ||
		!strings.Contains(err.Error(), "requested: requests.gpusched.io/gpu-milli=250") {
		t.Fatalf("the ninth 250-milli pod: %v; want quota's refusal", err)
	}
	t.Logf("the ninth pod: %v", err)
	byAnnotation := share(demoPod("by-annotation"), 250, "")
	byAnnotation.Namespace = ns
	byAnnotation.Spec.SchedulerName = "gpusched"
	if _, err := client.CoreV1().Pods(ns).Create(ctx, byAnnotation, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a share by annotation (not counted by quota): %v", err)
	}

	// Every admitted pod runs with 250 milli of one GPU; no GPU holds more
	// than 1000 (9 × 250 on 4 GPUs).
	perGPU := waitShares(ctx, t, client, ns, 9)
	for g, milli := range perGPU {
		if milli > gpu.MilliPerGPU {
			t.Errorf("GPU %s holds %d milli", g, milli)
		}
	}

	if err := client.CoreV1().Pods(ns).Delete(ctx, "share-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitQuota(ctx, t, client, ns, quota.Name, func(q *v1.ResourceQuota) bool {
		used := q.Status.Used[quotaName]
		return used.Value() == 1750
	})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, sharePod("share-8"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the ninth pod after one left: %v", err)
	}
	waitShares(ctx, t, client, ns, 9)

	t.Run("the annotation form refused where quota is enforced", func(t *testing.T) {
		checkShareQuotaPolicy(ctx, t, client)
	})
}

// checkShareQuotaPolicy applies deploy/admission/share-quota.yaml and
// labels a namespace gpusched.io/share-quota=enforced: there a share by
// annotation, or a share's memory by annotation, is refused with a message
// naming the resource to use, while a share by resource and a whole-GPU pod
// with the memory annotation are admitted; an unlabelled namespace admits
// the annotation form as before.
func checkShareQuotaPolicy(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	applyPolicy(ctx, t, client, filepath.Join("..", "..", "deploy", "admission", "share-quota.yaml"))
	const ns = "team-enforced"
	enforced := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"gpusched.io/share-quota": "enforced"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, enforced, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	inNS := func(p *v1.Pod, namespace string) *v1.Pod { p.Namespace = namespace; return p }
	// The API server loads a new policy asynchronously.
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = client.CoreV1().Pods(ns).Create(ctx, inNS(share(demoPod("probe"), 999, ""), ns), dryRun); err != nil {
			break
		}
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `resources.limits["gpusched.io/gpu-milli"]: "999"`) {
		t.Fatalf("a share by annotation in %s: %v; want refused, naming the resource", ns, err)
	}
	byResource := inNS(demoPod("by-resource"), ns)
	byResource.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceMilli: resource.MustParse("250"), gpu.ResourceMemoryMiB: resource.MustParse("10240")}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, byResource, dryRun); err != nil {
		t.Errorf("a share by resource in %s: %v", ns, err)
	}
	memoryByAnnotation := inNS(demoPod("memory-by-annotation"), ns)
	memoryByAnnotation.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceMilli: resource.MustParse("250")}
	annotate(memoryByAnnotation, gpu.AnnotationMemory, "10Gi")
	if _, err := client.CoreV1().Pods(ns).Create(ctx, memoryByAnnotation, dryRun); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "gpusched.io/gpu-memory-mib resource") {
		t.Errorf("a share's memory by annotation in %s: %v; want refused, naming the resource", ns, err)
	}
	// nvidia.com/gpu: 0 is no whole GPU: the memory annotation would reserve
	// memory for the 1-milli share that quota does not count.
	zeroGPUs := inNS(demoPod("zero-gpus"), ns)
	zeroGPUs.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceGPU: resource.MustParse("0"), gpu.ResourceMilli: resource.MustParse("1")}
	annotate(zeroGPUs, gpu.AnnotationMemory, "80Gi")
	if _, err := client.CoreV1().Pods(ns).Create(ctx, zeroGPUs, dryRun); !apierrors.IsForbidden(err) {
		t.Errorf("nvidia.com/gpu 0 with a 1-milli share and 80Gi by annotation in %s: %v; want refused", ns, err)
	}
	whole := inNS(demoPod("whole"), ns)
	whole.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceGPU: resource.MustParse("1")}
	annotate(whole, gpu.AnnotationMemory, "40Gi")
	if _, err := client.CoreV1().Pods(ns).Create(ctx, whole, dryRun); err != nil {
		t.Errorf("a whole GPU with the memory annotation in %s: %v", ns, err)
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, share(demoPod("elsewhere"), 999, ""), dryRun); err != nil {
		t.Errorf("a share by annotation in an unlabelled namespace: %v", err)
	}
	// A LimitRange caps a container's share like any resource.
	limits := &v1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "shares", Namespace: ns},
		Spec: v1.LimitRangeSpec{Limits: []v1.LimitRangeItem{{
			Type: v1.LimitTypeContainer, Max: v1.ResourceList{gpu.ResourceMilli: resource.MustParse("500")}}}},
	}
	if _, err := client.CoreV1().LimitRanges(ns).Create(ctx, limits, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tooBig := inNS(demoPod("too-big"), ns)
	tooBig.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceMilli: resource.MustParse("600")}
	_, err = client.CoreV1().Pods(ns).Create(ctx, tooBig, dryRun)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "maximum gpusched.io/gpu-milli usage per Container is 500") {
		t.Errorf("a 600-milli container under a LimitRange max of 500: %v; want refused", err)
	}
	t.Logf("over the LimitRange: %v", err)

	// Adding the annotation to a pod later is refused too.
	plain := inNS(demoPod("plain"), ns)
	if _, err := client.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"gpusched.io/gpu-milli":"500"}}}`)
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, "plain", types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("adding the share annotation to a pod in %s: %v; want refused", ns, err)
	}
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, "plain", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("adding the share annotation through pods/status in %s: %v; want refused", ns, err)
	}
}

// applyPolicy creates the ValidatingAdmissionPolicies and bindings of a
// file of YAML documents.
func applyPolicy(ctx context.Context, t *testing.T, client kubernetes.Interface, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
}

func waitQuota(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, done func(*v1.ResourceQuota) bool) {
	t.Helper()
	var last *v1.ResourceQuota
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := client.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = q
		return done(q), nil
	})
	if err != nil {
		t.Fatalf("quota %s: %v; last status %+v", name, err, last)
	}
}

// waitShares waits until n pods of ns run, each with a 250-milli
// assignment, and returns the milli-GPU each GPU (node/index) holds.
func waitShares(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, n int) map[string]int64 {
	t.Helper()
	var perGPU map[string]int64
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		perGPU, last = map[string]int64{}, nil
		running := 0
		for _, p := range pods.Items {
			a, err := gpu.ParseAssignment(p.Annotations[gpu.AnnotationAssigned])
			last = append(last, p.Name+" "+string(p.Status.Phase)+" "+p.Annotations[gpu.AnnotationAssigned])
			if p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning || err != nil {
				continue
			}
			if a.Milli != 250 || len(a.Devices) != 1 {
				t.Fatalf("pod %s: assignment %q, want one GPU with 250 milli", p.Name, p.Annotations[gpu.AnnotationAssigned])
			}
			running++
			perGPU[gpuOf(a)] += a.Milli
		}
		return running == n, nil
	})
	if err != nil {
		t.Fatalf("%d share pods did not run: %v; pods: %q", n, err, last)
	}
	return perGPU
}
