package whatif

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// newPod is one pod to place, read once.
type newPod struct {
	pod  *v1.Pod
	name string
	// demand is the pod's GPU demand; withHost adds its CPU and memory,
	// for host-aware policies (gpu.Policy.Demand).
	demand, withHost gpu.Demand
	requests         resources
	affinity         nodeaffinity.RequiredNodeAffinity
	// only, when not nil, names the nodes the pod's required node affinity
	// lists by metadata.name: NodeAffinity's PreFilter limits the cycle to
	// them; conflict is set when its terms name no node at all.
	only       map[string]bool
	conflict   bool
	notModeled []string
}

// readNewPod reads a pod to place.
func readNewPod(p *v1.Pod) (newPod, error) {
	if p == nil {
		return newPod{}, errors.New("want a Pod, found nothing")
	}
	d, err := gpu.DemandFromPod(p)
	if err != nil {
		return newPod{}, fmt.Errorf("pod %s: %w", podName(p), err)
	}
	withHost := d
	withHost.FillHost(p)
	np := newPod{
		pod: p, name: podName(p), demand: d, withHost: withHost,
		requests:   podRequests(p),
		affinity:   nodeaffinity.GetRequiredNodeAffinity(p),
		notModeled: notModeled(p),
	}
	np.only, np.conflict = namedNodes(p)
	return np, nil
}

// namedNodes is NodeAffinity's PreFilter: when every term of the pod's
// required node affinity names nodes (matchFields metadata.name In), the
// union of the nodes each term names; nil when any term does not. conflict
// is set when the terms name nodes and their union is empty.
func namedNodes(p *v1.Pod) (only map[string]bool, conflict bool) {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, false
	}
	union := map[string]bool{}
	for _, t := range terms {
		var names map[string]bool // the intersection of the term's lists
		for _, r := range t.MatchFields {
			if r.Key != "metadata.name" || r.Operator != v1.NodeSelectorOpIn {
				continue
			}
			listed := map[string]bool{}
			for _, v := range r.Values {
				if names == nil || names[v] {
					listed[v] = true
				}
			}
			names = listed
		}
		if names == nil {
			return nil, false // a term that names no node allows every node
		}
		for n := range names {
			union[n] = true
		}
	}
	return union, len(union) == 0
}

// notModeled names what the pod asks of the filters what-if does not model.
func notModeled(p *v1.Pod) []string {
	var out []string
	if a := p.Spec.Affinity; a != nil {
		if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			out = append(out, "inter-pod affinity")
		}
		if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			out = append(out, "inter-pod anti-affinity")
		}
	}
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			out = append(out, "topology spread")
			break
		}
	}
	if hasHostPorts(p) {
		out = append(out, "host ports")
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			out = append(out, "persistent volumes")
			break
		}
	}
	if len(p.Spec.ResourceClaims) > 0 {
		out = append(out, "DRA resource claims")
	}
	if len(p.Spec.SchedulingGates) > 0 {
		out = append(out, "scheduling gates")
	}
	if p.Spec.SchedulingGroup != nil || p.Labels[podgroup.LabelPodGroup] != "" {
		out = append(out, "gang")
	}
	return out
}

func hasHostPorts(p *v1.Pod) bool {
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for _, port := range cs[i].Ports {
				if port.HostPort > 0 {
					return true
				}
			}
		}
	}
	return false
}
