package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"

	"github.com/gpusched/gpusched/internal/schedconfig"
)

// SchedulerSyncTimeout bounds how long StartScheduler waits for the new
// scheduler's informers and event handlers to sync.
const SchedulerSyncTimeout = time.Minute

// configzName is the key app.Run registers in the process-global configz
// registry; registering it twice fails, so it is removed after each run.
const configzName = "componentconfig"

// Only one kube-scheduler may run per process at a time: app.Run registers
// process-global state (configz, metrics) that a second concurrent instance
// would collide with. The slot is held from StartScheduler until that
// scheduler's Run has returned.
var (
	schedulerSlotMu sync.Mutex
	schedulerActive bool
)

// Scheduler is a kube-scheduler running in-process via app.Run.
type Scheduler struct {
	// Sched is the scheduler instance built by app.Setup. It is exposed for
	// inspection (profiles, frameworks); do not call Run on it.
	Sched *scheduler.Scheduler

	cancel   context.CancelFunc
	done     chan struct{}
	runErr   error // written before done is closed
	stopOnce sync.Once
}

// StartScheduler runs a full kube-scheduler in-process, built the same way as
// the kube-scheduler command: options.NewOptions with ConfigFile set to
// configPath (a KubeSchedulerConfiguration file, see SchedulerConfig), then
// app.Setup with the out-of-tree plugins and app.Run in a goroutine. Secure
// serving (health, metrics) is disabled: the scheduler opens no port.
//
// It returns once the scheduler's informer caches and event handlers have
// synced. It fails if setup fails, if the scheduler exits before syncing,
// if syncing takes longer than SchedulerSyncTimeout, or if another
// Scheduler of this process has not been stopped yet.
//
// The scheduler runs until Stop is called or ctx ends.
func StartScheduler(ctx context.Context, configPath string, outOfTree ...app.Option) (_ *Scheduler, err error) {
	if err := acquireSchedulerSlot(); err != nil {
		return nil, err
	}
	released := false
	defer func() {
		if !released {
			releaseSchedulerSlot()
		}
	}()

	opts := options.NewOptions()
	opts.ConfigFile = configPath
	// BindPort 0 with no Listener disables secure serving entirely.
	opts.SecureServing.BindPort = 0

	runCtx, cancel := context.WithCancel(ctx)
	cc, sched, err := app.Setup(runCtx, opts, outOfTree...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kube-scheduler setup: %w", err)
	}

	s := &Scheduler{Sched: sched, cancel: cancel, done: make(chan struct{})}
	// A stale registration could only come from a scheduler not started
	// here; we hold the slot, so removing it cannot affect a live instance.
	configz.Delete(configzName)
	released = true // the Run goroutine releases the slot from now on
	go func() {
		defer close(s.done)
		defer releaseSchedulerSlot()
		defer configz.Delete(configzName)
		s.runErr = app.Run(runCtx, cc, sched)
	}()

	syncCtx, syncCancel := context.WithTimeout(runCtx, SchedulerSyncTimeout)
	defer syncCancel()
	synced := make(chan error, 1)
	go func() { synced <- sched.WaitForHandlersSync(syncCtx) }()
	select {
	case err := <-synced:
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("kube-scheduler did not sync: %w", err)
		}
	case <-s.done:
		s.Stop()
		return nil, fmt.Errorf("kube-scheduler exited during startup: %w", s.runErr)
	}
	return s, nil
}

// Stop cancels the scheduler's context and blocks until app.Run has
// returned and the process-global state it registered is released, so a new
// Scheduler can be started right after. It is idempotent and safe to call
// from several goroutines.
func (s *Scheduler) Stop() {
	s.stopOnce.Do(s.cancel)
	<-s.done
}

// Done is closed once app.Run has returned.
func (s *Scheduler) Done() <-chan struct{} { return s.done }

// Err is app.Run's result; it is meaningful once Done is closed.
func (s *Scheduler) Err() error {
	select {
	case <-s.done:
		return s.runErr
	default:
		return nil
	}
}

func acquireSchedulerSlot() error {
	schedulerSlotMu.Lock()
	defer schedulerSlotMu.Unlock()
	if schedulerActive {
		return errors.New("another kube-scheduler is still running in this process; stop it first")
	}
	schedulerActive = true
	return nil
}

func releaseSchedulerSlot() {
	schedulerSlotMu.Lock()
	defer schedulerSlotMu.Unlock()
	schedulerActive = false
}

// SchedulerConfig parses a KubeSchedulerConfiguration YAML document, fills in
// apiVersion (kubescheduler.config.k8s.io/v1) and kind when missing, sets
// clientConnection.kubeconfig to kubeconfig and leaderElection.leaderElect to
// false (one scheduler, no Lease to wait for), and re-encodes it. Every
// other field is kept as written. An empty document yields the default
// configuration.
func SchedulerConfig(config, kubeconfig string) ([]byte, error) {
	doc, err := schedconfig.Parse([]byte(config))
	if err != nil {
		return nil, err
	}
	if err := doc.SetKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	if err := doc.SetLeaderElect(false); err != nil {
		return nil, err
	}
	return doc.Encode()
}
