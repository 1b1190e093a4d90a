package dashboard

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

// draWatch is the dashboard's informers of the DRA objects gpuview reads.
type draWatch struct {
	driver      string
	watched     []cache.SharedIndexInformer
	sliceLister resourcelisters.ResourceSliceLister
	claimLister resourcelisters.ResourceClaimLister
	classLister resourcelisters.DeviceClassLister
}

// draInformers returns informers of ResourceSlices, ResourceClaims and
// DeviceClasses. It returns nil when the API server serves no
// resource.k8s.io/v1 or the dashboard may not list one of them (its
// ClusterRole in deploy/dashboard/rbac.yaml allows it): the dashboard then
// shows no DRA GPUs and says so once in its log. Any other error of the
// probing lists is returned, so that the dashboard does not run for good
// without DRA because the API server was briefly unavailable.
func (s *Server) draInformers(ctx context.Context, factory informers.SharedInformerFactory) (*draWatch, error) {
	logger := klog.FromContext(ctx)
	one := metav1.ListOptions{Limit: 1}
	probes := []struct {
		resource string
		list     func() error
	}{
		{"resourceslices", func() error { _, err := s.client.ResourceV1().ResourceSlices().List(ctx, one); return err }},
		{"resourceclaims", func() error {
			_, err := s.client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, one)
			return err
		}},
		{"deviceclasses", func() error { _, err := s.client.ResourceV1().DeviceClasses().List(ctx, one); return err }},
	}
	for _, p := range probes {
		switch err := p.list(); {
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			logger.Info("Not showing DRA GPUs: cannot list "+p.resource+".resource.k8s.io", "err", err)
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("listing %s.resource.k8s.io: %w", p.resource, err)
		}
	}
	r := factory.Resource().V1()
	return &draWatch{driver: s.opts.DRADriver,
		watched:     []cache.SharedIndexInformer{r.ResourceSlices().Informer(), r.ResourceClaims().Informer(), r.DeviceClasses().Informer()},
		sliceLister: r.ResourceSlices().Lister(), claimLister: r.ResourceClaims().Lister(), classLister: r.DeviceClasses().Lister()}, nil
}

// list is the DRA objects as the informers hold them; nil without DRA.
func (w *draWatch) list() (*gpuview.DRA, error) {
	if w == nil {
		return nil, nil
	}
	slices, err := w.sliceLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claims, err := w.claimLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	classes, err := w.classLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return &gpuview.DRA{Driver: w.driver, Slices: slices, Claims: claims, Classes: classes}, nil
}
