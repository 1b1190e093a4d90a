package gpugang

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Less orders the scheduling queue by priority, then by the age of the
// pod's gang (its PodGroup's creation time), then by gang, then by the pod's
// own time in the queue (gang.Less). A pod outside any gang is its own gang,
// as old as its time in the queue, so with no gangs the order is
// PrioritySort's. Entities other than pods (the Workload API's pod groups)
// are ordered by priority and time in the queue.
func (p *GPUGang) Less(a, b fwk.QueuedEntityInfo) bool {
	return gang.Less(p.sortKey(a), p.sortKey(b))
}

type podInfoGetter interface{ GetPodInfo() fwk.PodInfo }

func (p *GPUGang) sortKey(e fwk.QueuedEntityInfo) gang.SortKey {
	k := gang.SortKey{Priority: e.GetPriority(), Since: e.GetTimestamp(), Enqueued: e.GetTimestamp()}
	g, ok := e.(podInfoGetter)
	if !ok || g.GetPodInfo() == nil {
		return k
	}
	pod := g.GetPodInfo().GetPod()
	k.Pod = pod.Namespace + "/" + pod.Name
	name, ok, err := podgroup.NameOf(pod)
	if !ok || err != nil {
		return k
	}
	k.Group = groupKey(pod.Namespace, name)
	if pg := p.podGroup(pod.Namespace, name); pg != nil {
		k.Since = pg.GetCreationTimestamp().Time
	} else {
		k.Since = pod.CreationTimestamp.Time
	}
	return k
}

// SignPod keeps opportunistic batching on for pods outside any gang, which
// this plugin does not touch (no fragment), and off for gang pods: the
// topology score of a gang's next pod depends on where its siblings were
// just reserved, so a cached result of an identical pod would be stale.
func (p *GPUGang) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if _, ok := pod.Labels[podgroup.LabelPodGroup]; ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "gang pods are scored against their gang's placement")
	}
	return nil, nil
}
