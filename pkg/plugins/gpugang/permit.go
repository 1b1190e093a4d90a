package gpugang

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Reserve records that the gang pod holds its node. Together with the
// gang's bound pods, these are what Permit counts toward minMember.
func (p *GPUGang) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if gs := gangOf(state); gs != nil {
		p.reservations.Add(gs.key, pod.UID, nodeName, p.now())
	}
	return nil
}

// PostBind forgets the reservation of a bound pod: from now on the
// scheduler's pod cache counts it for its gang. Reservations are in-flight
// pods only, so a gang's wait is timed from its oldest pod in flight.
func (p *GPUGang) PostBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	p.reservations.Remove(pod.UID)
}

// Unreserve runs when a reserved pod does not bind: it timed out or was
// rejected at Permit, or a later step failed. It forgets the reservation and
// releases the gang: every other pod of the gang waiting at Permit is
// rejected, so that no part of a gang holds GPUs on its own. The reason
// recorded on the PodGroup says whether the gang's time ran out.
func (p *GPUGang) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	gs := gangOf(state)
	if gs == nil {
		p.reservations.Remove(pod.UID)
		return
	}
	since, waiting := p.reservations.Since(gs.key)
	placed := len(p.placed(gs.key))
	p.reservations.Remove(pod.UID)
	reason := fmt.Sprintf("pod %s left its reservation on node %s", klog.KObj(pod), nodeName)
	if waiting && !p.now().Before(since.Add(gs.timeout)) {
		reason = fmt.Sprintf("timed out after %v with %d of %d pods reserved or bound", gs.timeout, placed, gs.minMember)
	}
	p.release(ctx, gs, reason)
}

// Permit lets a gang pod bind once minMember pods of its gang are reserved
// or bound, and then lets every waiting pod of the gang go too. Until then
// the pod waits, at most until the gang's timeout counted from its first
// reservation, and the gang's pods still in the queue are moved to its
// front so that they are tried next.
func (p *GPUGang) Permit(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	gs := gangOf(state)
	if gs == nil {
		return nil, 0
	}
	placed := p.placed(gs.key)
	log := logger(ctx).WithValues("pod", klog.KObj(pod), "podGroup", gs.key)
	if len(placed) >= gs.minMember {
		allowed := p.allowWaiting(gs.key)
		log.V(3).Info("Gang complete", "placed", len(placed), "minMember", gs.minMember, "allowed", allowed)
		if allowed > 0 {
			p.recordEvent(gs.object, v1.EventTypeNormal, "Scheduled", fmt.Sprintf(
				"%d pods of %d needed are reserved or bound; binding them", len(placed), gs.minMember))
		}
		p.status.enqueue(gs.key)
		return nil, 0
	}
	since := p.reservations.Add(gs.key, pod.UID, nodeName, p.now())
	wait := since.Add(gs.timeout).Sub(p.now())
	if wait <= 0 {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: timed out after %v with %d of %d pods reserved",
			gs.key, gs.timeout, len(placed), gs.minMember)), 0
	}
	p.activateQueued(ctx, gs.key, placed)
	p.status.enqueue(gs.key)
	log.V(4).Info("Waiting for the rest of the gang", "placed", len(placed), "minMember", gs.minMember, "wait", wait)
	return fwk.NewStatus(fwk.Wait, fmt.Sprintf("gang %s: %d of %d pods reserved", gs.key, len(placed), gs.minMember)), wait
}

// allowWaiting lets every pod of the gang waiting at Permit go on, and
// returns how many there were.
func (p *GPUGang) allowWaiting(key string) int {
	n := 0
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if p.inGang(wp.GetPod(), key) {
			wp.Allow(Name)
			n++
		}
	})
	return n
}

// release rejects every pod of the gang waiting at Permit, with reason, and
// starts the gang's back-off: its pods stay out of the queue until it ends
// (or until GPUs are freed, see EventsToRegister), then they are moved back
// all at once. It returns how many waiting pods were rejected.
func (p *GPUGang) release(ctx context.Context, gs *gangState, reason string) int {
	rejected := 0
	msg := fmt.Sprintf("gang %s released: %s", gs.key, reason)
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if p.inGang(wp.GetPod(), gs.key) && wp.Reject(Name, msg) {
			rejected++
		}
	})
	backoff := time.Duration(p.args.BackoffSeconds) * time.Second
	until, started := p.backoff.Start(gs.key, backoff)
	if started {
		logger(ctx).V(2).Info("Gang released", "podGroup", gs.key, "reason", reason, "rejected", rejected, "backoffUntil", until)
		p.recordEvent(gs.object, v1.EventTypeWarning, "GangReleased", fmt.Sprintf(
			"%s; released %d reserved pods, retrying in %v", reason, rejected, backoff))
		time.AfterFunc(until.Sub(p.now()), func() { p.activateQueued(ctx, gs.key, nil) })
	}
	p.status.enqueue(gs.key)
	return rejected
}

// activateQueued moves the gang's pods that are neither reserved nor bound
// to the front of the scheduling queue.
func (p *GPUGang) activateQueued(ctx context.Context, key string, placed map[string]string) {
	pods := map[string]*v1.Pod{}
	for _, m := range p.members(key) {
		if _, ok := placed[string(m.UID)]; !ok && m.Spec.NodeName == "" {
			pods[m.Namespace+"/"+m.Name] = m
		}
	}
	if len(pods) > 0 {
		p.handle.Activate(logger(ctx), pods)
	}
}

// inGang reports whether pod is a member of the gang key.
func (p *GPUGang) inGang(pod *v1.Pod, key string) bool {
	name, ok, err := podgroup.NameOf(pod)
	return ok && err == nil && groupKey(pod.Namespace, name) == key
}
