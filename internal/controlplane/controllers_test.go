package controlplane

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestControllers: with Options.Controllers and ServiceAccount admission on,
// a Deployment gets its ReplicaSet and pods (each with the "default"
// ServiceAccount), a Job its pods, a new namespace its ServiceAccount;
// deleting the Deployment lets the garbage collector delete its pods, and
// deleting the namespace lets the namespace controller empty and remove it.
// Without the option, the same Deployment gets no ReplicaSet.
func TestControllers(t *testing.T) {
	QuietKlog("FATAL")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name        string
		controllers bool
	}{
		{"with controllers", true},
		{"without controllers", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := DefaultAPIServerFlags
			if tc.controllers {
				flags = ControllerAPIServerFlags
			}
			start := time.Now()
			cp, err := Start(Options{Dir: t.TempDir(), APIServerFlags: flags, Controllers: tc.controllers})
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Stop()
			t.Logf("started in %v", time.Since(start))
			client := cp.Client

			if _, err := client.AppsV1().Deployments("default").Create(ctx, deploymentOf("web", 2), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if !tc.controllers {
				time.Sleep(2 * time.Second)
				if rs, err := client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{}); err != nil || len(rs.Items) != 0 {
					t.Fatalf("without controllers: ReplicaSets %v, %v; want none", rs, err)
				}
				return
			}
			pods := waitForPods(ctx, t, client, "default", "app=web", 2)
			for _, p := range pods {
				if p.Spec.ServiceAccountName != "default" {
					t.Errorf("pod %s: serviceAccountName %q, want default (admission)", p.Name, p.Spec.ServiceAccountName)
				}
			}

			job := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "default"},
				Spec: batchv1.JobSpec{
					Parallelism: ptr.To[int32](3),
					Template: v1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "batch"}},
						Spec:       podSpec(v1.RestartPolicyNever),
					},
				},
			}
			if _, err := client.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitForPods(ctx, t, client, "default", "app=batch", 3)

			background := metav1.DeletePropagationBackground
			if err := client.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
				t.Fatal(err)
			}
			waitForPods(ctx, t, client, "default", "app=web", 0)

			if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			poll(ctx, t, "ServiceAccount team/default", func(ctx context.Context) bool {
				_, err := client.CoreV1().ServiceAccounts("team").Get(ctx, "default", metav1.GetOptions{})
				return err == nil
			})
			if _, err := client.AppsV1().Deployments("team").Create(ctx, deploymentOf("api", 1), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitForPods(ctx, t, client, "team", "app=api", 1)
			if err := client.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			poll(ctx, t, "namespace team removed", func(ctx context.Context) bool {
				_, err := client.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
		})
	}
}

func deploymentOf(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(v1.RestartPolicyAlways),
			},
		},
	}
}

func podSpec(restart v1.RestartPolicy) v1.PodSpec {
	return v1.PodSpec{
		RestartPolicy: restart,
		Containers:    []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
	}
}

// waitForPods polls until exactly n pods that are not being deleted match
// selector in ns, and returns them.
func waitForPods(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, selector string, n int) []v1.Pod {
	t.Helper()
	var live []v1.Pod
	poll(ctx, t, "pods "+selector, func(ctx context.Context) bool {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		live = live[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		return len(live) == n
	})
	return live
}

func poll(ctx context.Context, t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
