package gpugang

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
)

var _ gangview.Gangs = &GPUGang{}

// Close implements io.Closer, which the framework calls when its scheduler
// stops.
func (p *GPUGang) Close() error { return nil }

// Unplaced (gangview.Gangs) is what a preempting gang pod still lacks, as GPUGang's PreFilter
// read the gang in this cycle: key is the gang's "namespace/name", pending
// its members neither reserved nor bound (the pod of the cycle among them),
// and needed how many of those must still be placed for the gang to reach
// minMember. ok is false for a pod outside a gang.
func (p *GPUGang) Unplaced(state fwk.CycleState) (key string, pending []*v1.Pod, needed int, ok bool) {
	gs := gangOf(state)
	if gs == nil {
		return "", nil, 0, false
	}
	placed := p.placed(gs.key)
	for _, m := range p.members(gs.key) {
		if _, in := placed[string(m.UID)]; !in {
			pending = append(pending, m)
		}
	}
	return gs.key, pending, max(0, gs.minMember-len(placed)), true
}

// Siblings returns the gang pod belongs to ("namespace/name") and its bound
// members, pod included; an empty key for a pod outside a gang.
func (p *GPUGang) Siblings(pod *v1.Pod) (key string, bound []*v1.Pod) {
	keys, _ := groupOfObject(pod)
	if len(keys) == 0 {
		return "", nil
	}
	for _, m := range p.members(keys[0]) {
		if m.Spec.NodeName != "" {
			bound = append(bound, m)
		}
	}
	return keys[0], bound
}
