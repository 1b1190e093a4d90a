package defrag

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/gpusched/gpusched/pkg/gpuview"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// ReadGangSpecs lists the cluster's PodGroups and returns what each valid
// one says of its gang, by "namespace/name": how the defragmenter and
// `kubectl gpusched` read them. A cluster without the PodGroup CRD, or a
// client that may not list PodGroups, has none (nil, nil). A gang whose
// PodGroup is missing here is not planned for (askOf); the gang part of
// `kubectl gpusched explain` sizes it by its pods (gpuview.Snapshot.Gang).
func ReadGangSpecs(ctx context.Context, dyn dynamic.Interface) (map[string]gpuview.GangSpec, error) {
	groups, err := dyn.Resource(podgroup.Resource).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing PodGroups: %w", err)
	}
	specs := make(map[string]gpuview.GangSpec, len(groups.Items))
	for i := range groups.Items {
		pg, err := podgroup.FromUnstructured(&groups.Items[i])
		if err != nil || pg.Validate() != nil {
			continue // GPUGang holds its gang back, telling its pods why
		}
		mixed, _ := pg.MixedModels()
		specs[pg.Namespace+"/"+pg.Name] = gpuview.GangSpec{MinMember: int(pg.Spec.MinMember), MixedModels: mixed}
	}
	return specs, nil
}
