package testcluster

import (
	"context"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controller/statefulset"
)

// StartStatefulSetController runs kube-controller-manager's statefulset
// controller against the cluster until the test ends: it creates each
// StatefulSet's pods under their stable names, and creates a pod again,
// with a new UID and the same name, when it is deleted. It uses its own
// informers; it returns once they have synced.
func (c *Cluster) StartStatefulSetController(ctx context.Context, t *testing.T) {
	t.Helper()
	client, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller := statefulset.NewStatefulSetController(ctx,
		factory.Core().V1().Pods(),
		factory.Apps().V1().StatefulSets(),
		factory.Core().V1().PersistentVolumeClaims(),
		factory.Apps().V1().ControllerRevisions(),
		client)
	runController(ctx, t, "statefulset", factory, func(ctx context.Context) { controller.Run(ctx, 2) })
}

// runController starts factory's informers and run, stops both when the
// test ends, and returns once the informers have synced.
func runController(ctx context.Context, t *testing.T, name string, factory informers.SharedInformerFactory, run func(context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%s controller: informer for %v did not sync", name, typ)
		}
	}
}
