package testcluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler"

	"github.com/gpusched/gpusched/internal/controlplane"
)

// SchedulerSyncTimeout bounds how long StartScheduler waits for the new
// scheduler's informers and event handlers to sync.
const SchedulerSyncTimeout = controlplane.SchedulerSyncTimeout

// Scheduler is a kube-scheduler running in-process via app.Run.
type Scheduler struct {
	// Sched is the scheduler instance built by app.Setup. It is exposed for
	// inspection (profiles, frameworks); do not call Run on it.
	Sched *scheduler.Scheduler
	// ConfigPath is the KubeSchedulerConfiguration file the scheduler was
	// started with, after testcluster's injections.
	ConfigPath string

	s         *controlplane.Scheduler
	t         *testing.T
	parentCtx context.Context
	stopOnce  sync.Once
}

// StartScheduler runs a full kube-scheduler in-process, built the same way as
// the kube-scheduler binary: options.NewOptions with ConfigFile set, then
// app.Setup(ctx, opts, outOfTree...) and app.Run in a goroutine
// (controlplane.StartScheduler).
//
// config is a KubeSchedulerConfiguration YAML document (typically only
// "profiles:" and plugin args). apiVersion and kind default to
// kubescheduler.config.k8s.io/v1 / KubeSchedulerConfiguration when omitted;
// an empty string yields the default configuration (one default-scheduler
// profile). The helper always overwrites clientConnection.kubeconfig with
// c.KubeconfigPath and leaderElection.leaderElect with false; any value the
// caller sets for those two fields is ignored. Secure serving (healthz,
// metrics) is disabled, so the scheduler opens no listening port.
//
// StartScheduler returns once the scheduler's informer caches and event
// handlers have synced, i.e. it is about to start (or has started) its
// scheduling loop. It fails the test if setup fails, if the scheduler exits
// before syncing, or if syncing takes longer than SchedulerSyncTimeout.
//
// The scheduler runs until Stop is called, ctx is cancelled, or the test
// ends (Stop is registered with t.Cleanup). At most one Scheduler may be
// running per process; starting a second one before the first is stopped
// fails the test.
func (c *Cluster) StartScheduler(ctx context.Context, t *testing.T, config string, outOfTree ...app.Option) *Scheduler {
	t.Helper()

	c.schedSeq++
	cfgPath := filepath.Join(t.TempDir(), "scheduler-config-"+strconv.Itoa(c.schedSeq)+".yaml")
	data, err := injectSchedulerConfig(config, c.KubeconfigPath)
	if err != nil {
		t.Fatalf("testcluster: scheduler config: %v", err)
	}
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatalf("testcluster: writing scheduler config: %v", err)
	}

	s, err := controlplane.StartScheduler(ctx, cfgPath, outOfTree...)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	sched := &Scheduler{Sched: s.Sched, ConfigPath: cfgPath, s: s, t: t, parentCtx: ctx}
	t.Cleanup(sched.Stop)
	return sched
}

// Stop cancels the scheduler's context and blocks until app.Run has
// returned and all process-global state it registered is released, so a new
// Scheduler can be started right after. It is idempotent and safe to call
// from several goroutines. If the scheduler had already exited on its own
// while its parent context was still live (a crash rather than a requested
// stop), Stop reports that with t.Errorf.
func (s *Scheduler) Stop() {
	s.stopOnce.Do(func() {
		select {
		case <-s.s.Done():
			if s.parentCtx.Err() == nil {
				s.t.Errorf("testcluster: kube-scheduler exited unexpectedly: %v", s.s.Err())
			}
		default:
		}
	})
	s.s.Stop()
}

// Done is closed once app.Run has returned.
func (s *Scheduler) Done() <-chan struct{} { return s.s.Done() }

// injectSchedulerConfig is controlplane.SchedulerConfig: apiVersion and kind
// defaulted, clientConnection.kubeconfig set, leader election off.
func injectSchedulerConfig(config, kubeconfig string) ([]byte, error) {
	return controlplane.SchedulerConfig(config, kubeconfig)
}

// KnowsNode reports whether the scheduler's cache holds the node: it has
// seen the node added and not yet seen it deleted. The cache follows the
// API server through a watch, so it may lag behind it.
func (s *Scheduler) KnowsNode(name string) bool {
	_, ok := s.s.Sched.Cache.Dump().Nodes[name]
	return ok
}
