package gpuplacement

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement/internal/dra"
)

// assignmentState carries the pod's assignment from Reserve to PreBind.
type assignmentState struct{ assignment gpu.Assignment }

// Clone implements fwk.StateData; assignmentState is never modified.
func (s *assignmentState) Clone() fwk.StateData { return s }

// Reserve chooses the pod's GPUs on the selected node, as Score did, and
// assumes them in the ledger so that no later pod is given them while this one
// is bound. It counts every pod in flight on the node, held by the snapshot
// or not (gpu.Ledger.NodeInFlight). It fails, and the pod is retried, if the GPUs are no longer free.
func (p *GPUPlacement) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil // no GPU demand
	}
	ps := data.(*podState)
	demand := &ps.demand
	if demand.IsZero() {
		return nil // scored for its CPU only
	}
	if _, d := dra.NodeOf(state, nodeName); d != nil {
		return nil // deferred to DRA (dra.Placer.Filter): DynamicResources reserves the devices
	}
	nodeInfo, err := p.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: node %s: %w", Name, nodeName, err))
	}
	// In flight: the pods of a gang that the Workload API's pod-group cycle
	// reserved just before this one are not in the snapshot yet.
	n, taken := p.reservedView(p.ledger.NodeInFlight(nodeInfo.Node(), nodeInfo.GetGeneration(), podsOf(nodeInfo)), pod, ps)
	req := requestOf(state, nodeInfo, demand)
	chosen, fit := p.policy.PlaceReserved(n, &req, taken)
	if !fit.OK() {
		return statusOf(fit)
	}
	a := gpu.NewAssignment(n, demand, chosen)
	if taken != nil {
		err = p.ledger.AssumeReserved(pod.UID, a, taken.ID)
	} else {
		err = p.ledger.Assume(pod.UID, a)
	}
	if err != nil {
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	if taken != nil {
		logger(ctx).V(2).Info("Took a GPU reservation", "pod", klog.KObj(pod), "reservation", taken.ID, "reserved", taken.GPUs, "assignment", a.String())
	}
	state.Write(assignmentKey, &assignmentState{assignment: a})
	logger(ctx).V(4).Info("Reserved GPUs", "pod", klog.KObj(pod), "assignment", a.String())
	return nil
}

// bindKey marks, in the CycleState, a pod whose binding may have been sent:
// Bind is sending it, or PreBind wrote the assignment and the bind plugin
// comes next. Unreserve then reads the pod before releasing its GPUs.
const bindKey fwk.StateKey = "Bind" + Name

// bindSent is bindKey's value: what is known of the Binding's write once
// this plugin's Bind sent it (the zero value when another bind plugin did).
type bindSent struct {
	// refused: the API server refused the write (gpu.BindRefused), so
	// nothing was bound.
	refused bool
	// ended is when the write's last attempt ended.
	ended time.Time
}

// Clone implements fwk.StateData.
func (s bindSent) Clone() fwk.StateData { return s }

// Unreserve releases what Reserve assumed. After a failed bind it cannot
// release it yet, unless the API server refused the write: a bind cut off
// mid-request (the API server restarting) may have been written with its
// answer lost, or may still be, and GPUs given away now could end up on two
// pods once the pod shows up bound. Such a pod's GPUs stay held
// (gpu.Ledger.Doubt) until the engine's rule settles it (settleBind), or the
// pod shows up bound, or it is deleted.
func (p *GPUPlacement) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	if data, err := state.Read(bindKey); err == nil {
		sent := data.(bindSent)
		if a, ok := p.ledger.Assumed(pod.UID); ok && !sent.refused {
			ended := sent.ended
			if ended.IsZero() { // another bind plugin wrote it, and ended before Unreserve
				ended = time.Now()
			}
			p.ledger.Doubt(pod.UID)
			go p.settleBind(ctx, pod, gpu.BindInDoubt{UID: pod.UID, Assignment: a, NotBefore: ended.Add(p.settleAfter)})
		}
	}
	p.ledger.Forget(pod.UID)
}

// PreBindPreFlight tells the framework whether PreBind has work for this pod:
// writing its assignment, unless GPUPlacement is the profile's first bind
// plugin (Bind then writes it in the Binding), or removing a stale
// assignment from a pod that has none in this cycle (see PreBind).
func (p *GPUPlacement) PreBindPreFlight(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	_, err := state.Read(assignmentKey)
	_, stale := pod.Annotations[gpu.AnnotationAssigned]
	if (err != nil && !stale) || (err == nil && p.bindsFirst()) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind writes the assignment annotation before another bind plugin binds
// the pod, so that it is on the pod the moment the pod lands on its node: the
// node agent reads it there, and a restarted scheduler rebuilds its ledger
// from it. The merge patch touches only the annotation, so it cannot undo a
// concurrent change to the pod, and carries the pod's UID, which the API
// server takes as a precondition: a pod deleted and created again under the
// same name (a StatefulSet's) is not given the old pod's GPUs.
//
// A pod that holds no assignment in this cycle (it asks for no GPU any
// more, or its GPUs come from DRA) but still carries one, left by a bind
// that failed after PreBind or written before its demand changed, loses it
// before it binds: the node agent would give its containers those GPUs,
// which may be another pod's by now.
func (p *GPUPlacement) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	data, err := state.Read(assignmentKey)
	if err != nil {
		if stale, ok := pod.Annotations[gpu.AnnotationAssigned]; ok {
			if err := p.removeAssignment(ctx, pod, stale, ""); err != nil {
				return fwk.AsStatus(fmt.Errorf("%s: removing the stale %s %q of pod %s/%s: %w", Name, gpu.AnnotationAssigned, stale, pod.Namespace, pod.Name, err))
			}
			logger(ctx).V(2).Info("Removed a stale GPU assignment before binding", "pod", klog.KObj(pod), "assignment", stale)
		}
		return nil
	}
	a := data.(*assignmentState).assignment
	patch, err := AssignmentPatch(pod.UID, &a)
	if err != nil {
		return fwk.AsStatus(err)
	}
	_, err = p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: writing %s on pod %s/%s: %w", Name, gpu.AnnotationAssigned, pod.Namespace, pod.Name, err))
	}
	state.Write(bindKey, bindSent{}) // the bind plugin binds next
	return nil
}

// AssignmentPatch is PreBind's merge patch: it sets the assignment
// annotation of the pod with uid, and the API server refuses it for another
// pod of the same name (the UID cannot change).
func AssignmentPatch(uid types.UID, a *gpu.Assignment) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid, "annotations": map[string]string{gpu.AnnotationAssigned: a.String()}},
	})
}

// removeAssignment removes the pod's assignment annotation if the pod is
// still the one with pod.UID and the annotation still reads value (and,
// when resourceVersion is not empty, the pod is unchanged since it was
// read at that version): a JSON patch whose tests fail, and changes
// nothing, otherwise.
func (p *GPUPlacement) removeAssignment(ctx context.Context, pod *v1.Pod, value, resourceVersion string) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(gpu.AnnotationAssigned, "~", "~0"), "/", "~1")
	ops := []map[string]any{{"op": "test", "path": "/metadata/uid", "value": pod.UID}}
	if resourceVersion != "" {
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": resourceVersion})
	}
	ops = append(ops,
		map[string]any{"op": "test", "path": path, "value": value},
		map[string]any{"op": "remove", "path": path})
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// Bind binds a pod that holds GPUs with the assignment annotation in the
// Binding itself: the API server sets the node and the annotation in one
// write, so a bound pod never lacks its assignment, and it costs one API call
// instead of two. Pods without GPUs are left to the next bind plugin (Skip).
// It runs only when GPUPlacement comes before DefaultBinder in the profile's
// bind plugins, as in examples/gpusched-config.yaml; otherwise PreBind
// writes the annotation and DefaultBinder binds.
func (p *GPUPlacement) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	data, err := state.Read(assignmentKey)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	a := data.(*assignmentState).assignment
	binding := gpu.NewBinding(pod.Namespace, pod.Name, pod.UID, nodeName, &a)
	state.Write(bindKey, bindSent{})
	if err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		state.Write(bindKey, bindSent{refused: gpu.BindRefused(err), ended: time.Now()})
		return fwk.AsStatus(fmt.Errorf("%s: binding pod %s/%s to %s: %w", Name, pod.Namespace, pod.Name, nodeName, err))
	}
	return nil
}

// bindsFirst reports whether the framework offers pods to this plugin's Bind
// before any other bind plugin. It reads the profile once, on first use, when
// the framework is complete; a handle that cannot list its plugins counts as
// "no", which keeps PreBind writing the annotation.
func (p *GPUPlacement) bindsFirst() bool {
	p.bindOrder.Do(func() {
		if lister, ok := p.handle.(interface{ ListPlugins() *schedconfig.Plugins }); ok {
			if plugins := lister.ListPlugins(); plugins != nil && len(plugins.Bind.Enabled) > 0 {
				p.binds = plugins.Bind.Enabled[0].Name == Name
			}
		}
	})
	return p.binds
}

// AssignmentFrom returns the assignment Reserve made in this cycle, if any:
// what Bind writes in the pod's gpusched.io/gpu-assigned annotation. The
// simulator binds in-process with it.
func AssignmentFrom(state fwk.CycleState) (gpu.Assignment, bool) {
	data, err := state.Read(assignmentKey)
	if err != nil {
		return gpu.Assignment{}, false
	}
	return data.(*assignmentState).assignment, true
}
