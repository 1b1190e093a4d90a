package gpuplacement

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// followNodes keeps p.reservations from the node informer, and removes a
// deleted node from the ledger, so that its GPUs leave the census and its
// free room the room the policy's pressure on models follows
// (gpu.Ledger.RemoveNode). A handle without an informer factory (the
// plugin's unit tests, which add reservations to the index themselves)
// has none to follow.
func (p *GPUPlacement) followNodes() error {
	factory := p.handle.SharedInformerFactory()
	if factory == nil {
		return nil
	}
	set := func(obj any) {
		if node, ok := obj.(*v1.Node); ok {
			p.reservations.Set(node)
		}
	}
	_, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				p.reservations.Remove(node.Name)
				p.ledger.RemoveNode(node.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: watching nodes: %w", Name, err)
	}
	return nil
}

// reservedView is the ledger's view of the node for the cycle's pod: with
// the GPUs of a reservation the pod takes there given back to it (r), when
// PreFilter found the pod may take one (gpu.NodeGPUs.ForPod). Filter,
// Score and Reserve read it.
func (p *GPUPlacement) reservedView(n *gpu.NodeGPUs, pod *v1.Pod, s *podState) (*gpu.NodeGPUs, *gpu.Reservation) {
	if !s.mayTakeReservation {
		return n, nil
	}
	return n.ForPod(pod, &s.demand, p.ledger.HoldsReservation)
}
