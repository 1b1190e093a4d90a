package kubectlplugin

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpusched/gpusched/pkg/defrag"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// cluster is what the subcommands read: every node and pod, and what the
// PodGroups say of their gangs, where PodGroups are installed.
type cluster struct {
	nodes []*v1.Node
	pods  []*v1.Pod
	gangs map[string]gpuview.GangSpec
	// slices, claims and classes are the DRA objects, where the API server
	// serves them and the user may list them.
	slices  []*resourceapi.ResourceSlice
	claims  []*resourceapi.ResourceClaim
	classes []*resourceapi.DeviceClass
}

// readCluster lists nodes, pods, PodGroups and the DRA objects (readDRA). A cluster without the
// PodGroup CRD, or a user who may not list PodGroups, has gangs sized by
// their pods.
func readCluster(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) (*cluster, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	c := &cluster{}
	for i := range nodes.Items {
		c.nodes = append(c.nodes, &nodes.Items[i])
	}
	for i := range pods.Items {
		c.pods = append(c.pods, &pods.Items[i])
	}
	if err := c.readDRA(ctx, cs); err != nil {
		return nil, err
	}
	if c.gangs, err = defrag.ReadGangSpecs(ctx, dyn); err != nil {
		return nil, err
	}
	return c, nil
}

// readDRA lists the ResourceSlices, ResourceClaims and DeviceClasses. A
// cluster that serves no resource.k8s.io/v1, or a user who may not list
// one of them, has no DRA GPUs in the picture.
func (c *cluster) readDRA(ctx context.Context, cs kubernetes.Interface) error {
	all := metav1.ListOptions{}
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, all)
	if skip, err := draListed("ResourceSlices", err); skip || err != nil {
		return err
	}
	claims, err := cs.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, all)
	if skip, err := draListed("ResourceClaims", err); skip || err != nil {
		return err
	}
	classes, err := cs.ResourceV1().DeviceClasses().List(ctx, all)
	if skip, err := draListed("DeviceClasses", err); skip || err != nil {
		return err
	}
	for i := range slices.Items {
		c.slices = append(c.slices, &slices.Items[i])
	}
	for i := range classes.Items {
		c.classes = append(c.classes, &classes.Items[i])
	}
	for i := range claims.Items {
		c.claims = append(c.claims, &claims.Items[i])
	}
	return nil
}

// draListed reads a DRA listing's error: skip when the resource is not
// served or may not be listed, else the error, named.
func draListed(resource string, err error) (skip bool, _ error) {
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("listing %s: %w", resource, err)
	}
	return false, nil
}

func (o *options) snapshot(c *cluster) *gpuview.Snapshot {
	opts := gpuview.Options{SchedulerNames: o.scheduler, PoolLabel: o.poolLabel}
	if len(c.slices) > 0 {
		opts.DRA = &gpuview.DRA{Driver: o.draDriver, Slices: c.slices, Claims: c.claims, Classes: c.classes}
	}
	return gpuview.Build(c.nodes, c.pods, opts)
}
