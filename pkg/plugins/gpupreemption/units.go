package gpupreemption

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpusched/gpusched/pkg/plugins/internal/gangview"
)

// unit is what goes as one victim: upstream's victim (a pod, or a Workload
// API pod group that is disrupted whole), or a GPUGang gang with all its
// bound pods. It implements preemption.Victim, so upstream's ordering and
// PodDisruptionBudget accounting apply to it unchanged.
type unit struct {
	pods     []fwk.PodInfo
	priority int32
	start    *metav1.Time
	keyType  fwk.EntityKeyType
}

var _ preemption.Victim = &unit{}

func (u *unit) Priority() int32                 { return u.priority }
func (u *unit) Pods() []fwk.PodInfo             { return u.pods }
func (u *unit) EarliestStartTime() *metav1.Time { return u.start }
func (u *unit) Type() fwk.EntityKeyType         { return u.keyType }
func (u *unit) IsGroup() bool {
	return u.keyType == fwk.PodGroupKeyType || u.keyType == fwk.CompositePodGroupKeyType
}

// units turns the node's possible victims into the units that may go for
// preemptor: of lower priority, eligible on every node they touch, and a
// gang member together with its bound siblings — a gang none of whose pods
// has the preemptor's priority or more. Each gang appears once.
func (pl *GPUPreemption) units(state fwk.CycleState, nodeInfo fwk.NodeInfo, preemptor *v1.Pod, all []*preemption.DomainVictim) []*unit {
	priority := corev1helpers.PodPriority(preemptor)
	gangs := gangview.Read(state)
	seen := map[string]bool{}
	var out []*unit
	for _, dv := range all {
		if dv.Priority() >= priority || !pl.eligibleEverywhere(dv, preemptor) {
			continue
		}
		if len(dv.Pods()) == 1 && !dv.IsGroup() && gangs != nil {
			pod := dv.Pods()[0].GetPod()
			if key, siblings := gangs.Siblings(pod); len(siblings) > 1 {
				if seen[key] {
					continue
				}
				seen[key] = true
				if u := gangUnit(nodeInfo, siblings); u.priority < priority {
					out = append(out, u)
				}
				continue
			}
		}
		out = append(out, &unit{pods: dv.Pods(), priority: dv.Priority(), start: dv.EarliestStartTime(), keyType: dv.Type()})
	}
	return out
}

// eligibleEverywhere is DefaultPreemption's IsEligiblePod on every node the
// victim touches.
func (pl *GPUPreemption) eligibleEverywhere(dv *preemption.DomainVictim, preemptor *v1.Pod) bool {
	for _, ni := range dv.AffectedNodes() {
		if !pl.IsEligiblePod(ni, dv, preemptor) {
			return false
		}
	}
	return true
}

// gangUnit is a gang's bound pods as one unit, with its highest priority.
// Pods on nodeInfo keep that node's PodInfo, so that removing and adding
// them back leaves the node as it was.
func gangUnit(nodeInfo fwk.NodeInfo, siblings []*v1.Pod) *unit {
	local := map[string]fwk.PodInfo{}
	for _, pi := range nodeInfo.GetPods() {
		local[string(pi.GetPod().UID)] = pi
	}
	u := &unit{keyType: fwk.PodGroupKeyType}
	for i, pod := range siblings {
		pi, ok := local[string(pod.UID)]
		if !ok {
			var err error
			if pi, err = framework.NewPodInfo(pod); err != nil {
				continue
			}
		}
		u.pods = append(u.pods, pi)
		if p := corev1helpers.PodPriority(pod); i == 0 || p > u.priority {
			u.priority = p
		}
		if t := util.GetPodStartTime(pod); u.start == nil || t != nil && t.Before(u.start) {
			u.start = t
		}
	}
	return u
}
