package testcluster

import (
	"context"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

// StartResourceClaimController runs kube-controller-manager's resourceclaim
// controller against the cluster until the test ends: it creates the
// ResourceClaims of pods that use ResourceClaimTemplates (and records their
// names in the pods' status), and releases claims whose pods are gone, as
// in a real cluster. It uses its own informers; it returns once they have
// synced.
func (c *Cluster) StartResourceClaimController(ctx context.Context, t *testing.T) {
	t.Helper()
	client, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := resourceclaim.NewController(klog.FromContext(ctx), client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		t.Fatalf("resourceclaim controller: %v", err)
	}
	runController(ctx, t, "resourceclaim", factory, func(ctx context.Context) { controller.Run(ctx, 2) })
}
