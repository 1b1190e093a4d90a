package extender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// errNotLeader: with --leader-elect, only the instance that holds the lease
// binds. The scheduler retries the pod, and reaches the leader.
var errNotLeader = errors.New("this gpusched extender does not hold the leader lease; another instance binds pods, retry")

// errNotSynced: an instance binds only once it has read every node and pod.
var errNotSynced = errors.New("this gpusched extender has not read every node and pod yet; retry")

// bindOnlyWhileLeading makes the extender refuse binds until setLeading(true),
// and bounds them by the fence.
func (e *Extender) bindOnlyWhileLeading(f *fence) { e.leaderOnly, e.fence = true, f }

func (e *Extender) setLeading(leading bool) { e.leading.Store(leading) }

// mayBind reports whether this instance may bind now: without leader
// election always; with it, while it leads and at least minBindWindow is
// left before its fence. (client-go may report leading late, after the
// lease was lost; the fence, moved only by this instance's own successful
// renewals, still says no.)
func (e *Extender) mayBind() bool {
	if !e.leaderOnly {
		return true
	}
	return e.leading.Load() && time.Until(e.fence.until()) >= minBindWindow
}

// enterBind starts a bind's API calls if this instance may bind now, and
// reports whether it did; then leaveBind must follow once they are done. A
// release of the lease waits for the binds entered (fence.write).
func (e *Extender) enterBind() bool {
	if !e.leaderOnly {
		return true
	}
	e.fence.binds.RLock()
	if !e.mayBind() {
		e.fence.binds.RUnlock()
		return false
	}
	return true
}

func (e *Extender) leaveBind() {
	if e.leaderOnly {
		e.fence.binds.RUnlock()
	}
}

// minBindWindow is the least time before the fence in which a bind starts.
const minBindWindow = time.Second

// bindDeadline is when a bind starting at now must have ended its API
// calls: bindTimeout later and, with leader election, not after the fence.
func (e *Extender) bindDeadline(now time.Time) time.Time {
	deadline := now.Add(bindTimeout)
	if e.leaderOnly {
		if until := e.fence.until(); until.Before(deadline) {
			deadline = until
		}
	}
	return deadline
}

// fence bounds the binds of a leader by its lease.
//
// Another instance takes the Lease once it has seen no renewal for the lease
// duration (in whole seconds, as the record carries it). This instance's
// last renewal was written after it was sent, so no other instance can lead
// before sent + lease duration; the fence is earlier still, sent + renew
// deadline (Options.Validate keeps it under the whole seconds; the
// difference is the margin for clock rates and for a committed binding to
// reach the next leader's informer). Every bind's API calls end by the
// fence (their context's deadline), and no bind starts within
// minBindWindow of it; client-go's elector stops leading once renewals
// fail for the renew deadline, which the fence bounds as well. Releasing
// the lease (a stopping instance) lifts the fence, then waits for the binds
// in flight, then writes.
//
// What is left: a Binding the API server accepted before the fence may
// still commit after it, until the API server's own --request-timeout
// (docs/extender.md, "Fencing").
type fence struct {
	resourcelock.Interface
	renewDeadline time.Duration
	// binds is held for reading by each bind's API calls (enterBind), and
	// for writing by a release of the lease, which so waits for them.
	binds sync.RWMutex

	mu      sync.Mutex
	expires time.Time // sent + renew deadline of the last renewal of ours; zero when not held
}

// until returns the fence: zero when the lease is not held.
func (f *fence) until() time.Time {
	if f == nil {
		return time.Time{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expires
}

// Create and Update write the lease record; a successful write naming this
// instance moves the fence to the time it was sent plus the renew deadline,
// any other write (a release) removes it.
func (f *fence) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return f.write(ler, func() error { return f.Interface.Create(ctx, ler) })
}

func (f *fence) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return f.write(ler, func() error { return f.Interface.Update(ctx, ler) })
}

func (f *fence) write(ler resourcelock.LeaderElectionRecord, do func() error) error {
	sent := time.Now()
	if ler.HolderIdentity != f.Identity() {
		f.lift()
		f.binds.Lock() // the binds in flight end (by the fence, at the latest)
		f.binds.Unlock()
	}
	err := do()
	if err == nil && ler.HolderIdentity == f.Identity() {
		f.mu.Lock()
		if next := sent.Add(f.renewDeadline); next.After(f.expires) {
			f.expires = next
		}
		f.mu.Unlock()
	}
	return err
}

// lift removes the fence: this instance does not hold the lease.
func (f *fence) lift() {
	f.mu.Lock()
	f.expires = time.Time{}
	f.mu.Unlock()
}

// campaign runs leader election for the lease opts name, so that of several
// extender instances (two replicas, or the old and the new pod of a
// rollout) exactly one binds: binds choose GPUs from the instance's own
// view, and two instances binding to one node at once could choose the same
// GPU. Filter, prioritize and preempt only read, and every instance serves
// them. It returns a channel closed once the campaign is over: ctx ended and
// the lease, if held, was released.
func campaign(ctx context.Context, opts *Options, client kubernetes.Interface, ext *Extender) (<-chan struct{}, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader election identity: %w", err)
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(opts.LeaderElectionNamespace, opts.LeaderElectionName))
	identity := host + "_" + string(uuid.NewUUID())
	lock := &fence{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		renewDeadline: opts.RenewDeadline,
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: opts.LeaseDuration,
		RenewDeadline: opts.RenewDeadline,
		RetryPeriod:   opts.RetryPeriod,
		// A stopping leader hands over at once, after its binds in flight
		// (fence.write).
		ReleaseOnCancel: true,
		Name:            "gpusched-extender",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				logger.Info("Leading: binding pods", "identity", identity)
				ext.setLeading(true)
			},
			OnStoppedLeading: func() {
				logger.Info("Not leading: refusing binds", "identity", identity)
				ext.setLeading(false)
				lock.lift()
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	ext.bindOnlyWhileLeading(lock)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			elector.Run(klog.NewContext(ctx, logger)) // returns when leadership is lost, or ctx ends
		}
	}()
	return done, nil
}
