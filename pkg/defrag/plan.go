package defrag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// prefix starts the ID of every reservation this defragmenter writes:
// "<Options.Name>/", so that it finds its own after a restart, and leaves
// another defragmenter's alone.
func (d *Defragmenter) prefix() string { return d.opts.Name + "/" }

// activePlan is a plan being carried out.
type activePlan struct {
	id       string
	started  time.Time
	deadline time.Time
	// pending are the pods the plan makes room for (one, or a gang's);
	// for a plan adopted, those whose reservations were left.
	pending []*v1.Pod
	// held are the reservations the plan still holds, by ID.
	held map[string]gpu.Reservation
	// milli is the GPU the plan makes room for.
	milli int64
	// stopped: an eviction was refused; the plan follows only the pods it
	// evicted before, and ends without making room.
	stopped bool
}

// start carries plans out: it reserves the GPUs they chose, then evicts
// the pods they move. It reports whether the plans started.
func (d *Defragmenter) start(ctx context.Context, snap *gpuview.Snapshot, t *target, plans []gpu.Plan) bool {
	logger := klog.FromContext(ctx)
	now := d.opts.Now()
	d.seq++
	p := &activePlan{id: fmt.Sprintf("%s%s-%d", d.prefix(), now.UTC().Format("20060102t150405"), d.seq), started: now,
		deadline: now.Add(d.opts.PlanTimeout), pending: t.pods, held: map[string]gpu.Reservation{}}
	expires := now.Add(d.opts.PlanTimeout)
	// want: a reservation per pending pod ("<plan>/pod", or "<plan>/pod-<i>"
	// for a gang's), then one per pod moved ("<plan>/<move>").
	var want []gpu.Reservation
	for i, pod := range t.pods {
		id := p.id + "/pod"
		if t.gang != "" {
			id = fmt.Sprintf("%s/pod-%d", p.id, i)
		}
		want = append(want, gpu.Reservation{ID: id, Pod: pod.UID, GPUs: plans[i].Assignment.String(), Expires: expires})
		p.milli += int64(len(plans[i].Assignment.Devices)) * plans[i].Assignment.Milli
	}
	type moving struct {
		pod  *v1.Pod
		plan int // the plan that moves it
	}
	var moves []moving
	for k, plan := range plans {
		for _, mv := range plan.Moves {
			moved := snap.Pod(mv.Pod)
			if moved == nil || len(mv.To.Devices) == 0 {
				return false // the planner moves only pods Rules.Why allows: known, holding GPUs
			}
			ref := metav1.GetControllerOfNoCopy(moved)
			if ref == nil {
				return false
			}
			want = append(want, gpu.Reservation{ID: fmt.Sprintf("%s/%d", p.id, len(moves)), Owner: ref.UID, Namespace: moved.Namespace, Moves: moved.UID,
				GPUs: mv.To.String(), Expires: expires})
			moves = append(moves, moving{pod: moved, plan: k})
		}
	}
	for _, r := range want {
		if err := d.editReservations(ctx, nodeOf(&r), func(rs []gpu.Reservation) []gpu.Reservation { return append(rs, r) }); err != nil {
			logger.Error(err, "Reserving GPUs for a migration plan", "plan", p.id)
			d.active = p
			d.release(ctx, "its GPUs could not be reserved: "+err.Error())
			return false
		}
		r.Assignment, _ = gpu.ParseAssignment(r.GPUs)
		p.held[r.ID] = r
	}
	d.active = p
	for _, pod := range t.pods {
		d.told[pod.UID] = ""
		d.recorder.Eventf(pod, v1.EventTypeNormal, "MakingRoom", "plan %s: %s", p.id, describe(snap, t, plans))
	}
	d.awaitReservations(ctx, want)
	d.metrics.plans.WithLabelValues(string(Enforce), "started").Inc()
	d.metrics.active.Set(1)
	first := len(t.pods) // want[first+i] is moves[i]'s reservation
	for i, m := range moves {
		moved := m.pod
		err := d.client.PolicyV1().Evictions(moved.Namespace).Evict(ctx, evictionOf(moved, d.opts.GracePeriodSeconds))
		if err != nil && !apierrors.IsNotFound(err) {
			why := fmt.Sprintf("the eviction of %s/%s was refused: %v", moved.Namespace, moved.Name, err)
			d.recorder.Eventf(moved, v1.EventTypeWarning, "MigrationRefused", "plan %s: %s", p.id, why)
			// The pods evicted already keep their reservations; the rest
			// of the plan, the pending pods' included, is given up.
			for _, r := range want[first+i:] {
				d.unhold(ctx, r.ID)
			}
			for _, r := range want[:first] {
				d.unhold(ctx, r.ID)
			}
			p.stopped = true
			until := d.backOff(t.pods)
			for _, pod := range t.pods {
				d.recorder.Eventf(pod, v1.EventTypeWarning, "MigrationStopped", "plan %s stopped: %s; not planned for again before %s", p.id, why, until.UTC().Format(time.RFC3339))
			}
			d.metrics.plans.WithLabelValues(string(Enforce), "stopped").Inc()
			if len(p.held) == 0 {
				d.finish()
			}
			return true
		}
		d.moves = append(d.moves, move{at: now, node: moved.Spec.NodeName, namespace: moved.Namespace})
		d.metrics.moves.WithLabelValues(string(Enforce)).Inc()
		r := p.held[want[first+i].ID]
		forWhom := t.String()
		if t.gang != "" {
			forWhom += fmt.Sprintf(" (pod %s/%s)", t.pods[m.plan].Namespace, t.pods[m.plan].Name)
		}
		d.recorder.AnnotatedEventf(moved, map[string]string{eventAnnotationPlan: p.id, eventAnnotationFrom: moved.Spec.NodeName}, v1.EventTypeNormal, reasonMigrated,
			"plan %s evicted this pod to make room for %s on node %s; its replacement is reserved node %s GPUs %s",
			p.id, forWhom, plans[m.plan].Node, r.Assignment.Node, devices(&r.Assignment))
	}
	return true
}

// reservationsSeen bounds the wait for the reservations to come back
// through the watch before the evictions start.
const reservationsSeen = 10 * time.Second

// awaitReservations waits, up to reservationsSeen, until the
// defragmenter's own watch of the nodes shows every reservation of rs: the
// scheduler's watch sees them about as soon, and the replacements that the
// evictions bring must find them there. It goes on when the wait runs out
// (each pod then lands where the scheduler would place it anyway).
func (d *Defragmenter) awaitReservations(ctx context.Context, rs []gpu.Reservation) {
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, reservationsSeen, true, func(context.Context) (bool, error) {
		for i := range rs {
			n, err := d.nodes.Get(nodeOf(&rs[i]))
			if err != nil {
				return false, nil
			}
			have, _ := gpu.ReservationsOf(n)
			if !slices.ContainsFunc(have, func(r gpu.Reservation) bool { return r.ID == rs[i].ID }) {
				return false, nil
			}
		}
		return true, nil
	})
}

// adopt takes over a plan that an instance of this defragmenter left
// under way (it stopped, or lost its lease): the reservations of one plan
// of its own that are still current become the active plan, followed to
// its end as if this instance had started it. It started, at the latest,
// PlanTimeout before its reservations expire.
func (d *Defragmenter) adopt(ctx context.Context, nodes []*v1.Node, pods []*v1.Pod, now time.Time) {
	var p *activePlan
	for _, n := range nodes {
		rs, err := gpu.ReservationsOf(n)
		if err != nil {
			continue
		}
		for _, r := range rs {
			rest, own := strings.CutPrefix(r.ID, d.prefix())
			cut := strings.LastIndex(rest, "/")
			if !own || cut < 0 || !r.Current(now) {
				continue
			}
			planID := d.prefix() + rest[:cut] // "<prefix><plan>/<move>"
			if d.givenUp[planID] {
				continue // releaseOrphans removes it
			}
			if p == nil {
				p = &activePlan{id: planID, started: planStart(rest[:cut], r.Expires.Add(-d.opts.PlanTimeout)), deadline: r.Expires,
					held: map[string]gpu.Reservation{}}
			}
			if planID != p.id {
				continue // one plan at a time; releaseOrphans removes the others
			}
			p.held[r.ID] = r
			if r.Pod != "" {
				p.milli += int64(len(r.Assignment.Devices)) * r.Assignment.Milli
				if i := slices.IndexFunc(pods, func(q *v1.Pod) bool { return q.UID == r.Pod }); i >= 0 {
					p.pending = append(p.pending, pods[i])
				}
			}
		}
	}
	if p == nil {
		return
	}
	d.active = p
	d.metrics.active.Set(1)
	// A pod the plan moves that still runs where it was was never
	// evicted (the instance that started the plan stopped first): no room
	// was made, and the plan is given up.
	for _, r := range p.held {
		if r.Moves == "" {
			continue
		}
		if i := slices.IndexFunc(pods, func(q *v1.Pod) bool { return q.UID == r.Moves && q.DeletionTimestamp == nil }); i >= 0 {
			d.release(ctx, fmt.Sprintf("pod %s/%s, which it moves, was never evicted", pods[i].Namespace, pods[i].Name))
			return
		}
	}
}

// planStart is when a plan started, read from its ID's time
// ("20060102t150405-<n>"); otherwise fallback.
func planStart(id string, fallback time.Time) time.Time {
	stamp, _, _ := strings.Cut(id, "-")
	if t, err := time.Parse("20060102t150405", stamp); err == nil {
		return t
	}
	return fallback
}

// follow releases the reservations of the active plan whose pods arrived,
// and ends the plan when all have, or when its time is up.
func (d *Defragmenter) follow(ctx context.Context, pods []*v1.Pod, now time.Time) error {
	p := d.active
	for id, r := range p.held {
		if arrived(&r, pods, p.started) {
			d.unhold(ctx, id)
		}
	}
	switch {
	case len(p.held) == 0:
		if p.stopped {
			d.finish() // its evicted pods arrived; MigrationStopped told the rest
			break
		}
		for _, pod := range p.pending {
			d.recorder.Eventf(pod, v1.EventTypeNormal, "MigrationDone", "plan %s: done; this pod and the pods moved for it are bound", p.id)
		}
		d.metrics.plans.WithLabelValues(string(Enforce), "done").Inc()
		d.metrics.gpuMilli.Add(float64(p.milli))
		d.finish()
	case !now.Before(p.deadline):
		var late []string
		for id := range p.held {
			late = append(late, id)
		}
		slices.Sort(late)
		d.release(ctx, fmt.Sprintf("its pods did not arrive within %s (reservations %s)", d.opts.PlanTimeout, strings.Join(late, ", ")))
		d.metrics.plans.WithLabelValues(string(Enforce), "expired").Inc()
	}
	return nil
}

// arrived reports whether the pod a reservation is for is bound on its
// GPUs: the pod itself, or a pod of its controller created since the plan
// started, on the reserved GPUs.
func arrived(r *gpu.Reservation, pods []*v1.Pod, since time.Time) bool {
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		if r.Pod != "" {
			if p.UID == r.Pod {
				return true
			}
			continue
		}
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || ref.UID != r.Owner || p.Namespace != r.Namespace || p.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		if a, ok := gpu.AssignmentOf(p); ok && a.Node == r.Assignment.Node && slices.Equal(a.Devices, r.Assignment.Devices) {
			return true
		}
	}
	// The pending pod gone (deleted) has nothing to wait for.
	if r.Pod != "" {
		return !slices.ContainsFunc(pods, func(p *v1.Pod) bool { return p.UID == r.Pod })
	}
	return false
}

// release gives up the active plan: every reservation it holds goes, and
// the pending pod is told why.
func (d *Defragmenter) release(ctx context.Context, why string) {
	p := d.active
	d.givenUp[p.id] = true // a reservation not removed now is never adopted again
	for id := range p.held {
		d.unhold(ctx, id)
	}
	until := d.backOff(p.pending)
	for _, pod := range p.pending {
		d.recorder.Eventf(pod, v1.EventTypeWarning, "MigrationExpired", "plan %s given up: %s; not planned for again before %s", p.id, why, until.UTC().Format(time.RFC3339))
	}
	d.finish()
}

func (d *Defragmenter) finish() {
	d.active = nil
	d.metrics.active.Set(0)
}

// unhold removes one of the active plan's reservations from its node.
func (d *Defragmenter) unhold(ctx context.Context, id string) {
	p := d.active
	r, ok := p.held[id]
	if !ok {
		return
	}
	err := d.editReservations(ctx, r.Assignment.Node, func(rs []gpu.Reservation) []gpu.Reservation {
		return slices.DeleteFunc(rs, func(x gpu.Reservation) bool { return x.ID == id })
	})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Removing a GPU reservation", "reservation", id, "node", r.Assignment.Node)
		return // tried again next round; it expires meanwhile
	}
	delete(p.held, id)
}

// releaseOrphans removes this defragmenter's reservations that no active
// plan holds (left by an instance of it that stopped), and expired ones.
// Only Enforce calls it: DryRun changes nothing.
func (d *Defragmenter) releaseOrphans(ctx context.Context, nodes []*v1.Node, now time.Time) error {
	for _, n := range nodes {
		rs, err := gpu.ReservationsOf(n)
		if err != nil {
			// Only a defragmenter writes the annotation; one that no
			// ledger can read holds nothing, and editReservations
			// replaces it.
			klog.FromContext(ctx).Info("Removing a malformed GPU reservations annotation", "node", n.Name, "err", err)
		} else if !slices.ContainsFunc(rs, func(r gpu.Reservation) bool { return d.orphan(&r, now) }) {
			continue
		}
		err = d.editReservations(ctx, n.Name, func(rs []gpu.Reservation) []gpu.Reservation {
			return slices.DeleteFunc(rs, func(r gpu.Reservation) bool { return d.orphan(&r, now) })
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (d *Defragmenter) orphan(r *gpu.Reservation, now time.Time) bool {
	if !strings.HasPrefix(r.ID, d.prefix()) {
		return false // another defragmenter's
	}
	if !now.Before(r.Expires) {
		return true
	}
	if d.active == nil {
		return true
	}
	_, held := d.active.held[r.ID]
	return !held
}

// editReservations rewrites the node's reservations with edit, on the node
// as the API server has it now (retried on conflict). A malformed
// annotation is replaced.
func (d *Defragmenter) editReservations(ctx context.Context, name string, edit func([]gpu.Reservation) []gpu.Reservation) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := d.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rs, err := gpu.ReservationsOf(node)
		if err != nil {
			klog.FromContext(ctx).Info("Replacing a malformed GPU reservations annotation", "node", name, "err", err)
			rs = nil
		}
		next := edit(slices.Clone(rs))
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		if len(next) == 0 {
			delete(node.Annotations, gpu.AnnotationReservations)
		} else {
			node.Annotations[gpu.AnnotationReservations] = gpu.FormatReservations(next)
		}
		_, err = d.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// nodeOf is the node a reservation is on, read from its GPUs.
func nodeOf(r *gpu.Reservation) string {
	a, err := gpu.ParseAssignment(r.GPUs)
	if err != nil {
		return ""
	}
	return a.Node
}

// deleteUID is delete options that act only on the object with uid.
func deleteUID(uid types.UID) *metav1.DeleteOptions {
	return &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}
