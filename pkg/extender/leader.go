package extender

import (
	"context"
	"errors"
	"fmt"
	"os"

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

// bindOnlyWhileLeading makes the extender refuse binds until setLeading(true).
func (e *Extender) bindOnlyWhileLeading() { e.leaderOnly = true }

func (e *Extender) setLeading(leading bool) { e.leading.Store(leading) }

// mayBind reports whether this instance may bind now.
func (e *Extender) mayBind() bool { return !e.leaderOnly || e.leading.Load() }

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
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration: opts.LeaseDuration,
		RenewDeadline: opts.RenewDeadline,
		RetryPeriod:   opts.RetryPeriod,
		// A stopping leader hands over at once, after its binds in flight.
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
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	ext.bindOnlyWhileLeading()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			elector.Run(klog.NewContext(ctx, logger)) // returns when leadership is lost, or ctx ends
		}
	}()
	return done, nil
}
