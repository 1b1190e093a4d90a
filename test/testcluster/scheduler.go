package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"sigs.k8s.io/yaml"
)

// SchedulerSyncTimeout bounds how long StartScheduler waits for the new
// scheduler's informers and event handlers to sync.
const SchedulerSyncTimeout = time.Minute

// configzName is the key app.Run registers in the process-global configz
// registry; registering it twice fails, so it is removed after each run.
const configzName = "componentconfig"

// Only one kube-scheduler may run per process at a time: app.Run registers
// process-global state (configz) that a second concurrent instance would
// collide with. The slot (schedulerActive) is held from StartScheduler until that
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
	// ConfigPath is the KubeSchedulerConfiguration file the scheduler was
	// started with, after testcluster's injections.
	ConfigPath string

	t         *testing.T
	parentCtx context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	runErr    error // written before done is closed
	stopOnce  sync.Once
}

// StartScheduler runs a full kube-scheduler in-process, built the same way as
// the kube-scheduler binary: options.NewOptions with ConfigFile set, then
// app.Setup(ctx, opts, outOfTree...) and app.Run in a goroutine.
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

	if err := acquireSchedulerSlot(); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	released := false
	defer func() {
		if !released {
			releaseSchedulerSlot()
		}
	}()

	opts := options.NewOptions()
	opts.ConfigFile = cfgPath
	// BindPort 0 with no Listener disables secure serving entirely.
	opts.SecureServing.BindPort = 0

	runCtx, cancel := context.WithCancel(ctx)
	cc, sched, err := app.Setup(runCtx, opts, outOfTree...)
	if err != nil {
		cancel()
		t.Fatalf("testcluster: kube-scheduler setup: %v", err)
	}

	s := &Scheduler{
		Sched:      sched,
		ConfigPath: cfgPath,
		t:          t,
		parentCtx:  ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
	}
	// A stale registration could only come from a scheduler not started by
	// us; we hold the slot, so removing it cannot affect a live instance.
	configz.Delete(configzName)
	released = true // the Run goroutine releases the slot from now on
	go func() {
		defer close(s.done)
		defer releaseSchedulerSlot()
		defer configz.Delete(configzName)
		s.runErr = app.Run(runCtx, cc, sched)
	}()
	t.Cleanup(s.Stop)

	syncCtx, syncCancel := context.WithTimeout(runCtx, SchedulerSyncTimeout)
	defer syncCancel()
	synced := make(chan error, 1)
	go func() { synced <- sched.WaitForHandlersSync(syncCtx) }()
	select {
	case err := <-synced:
		if err != nil {
			s.Stop()
			t.Fatalf("testcluster: kube-scheduler did not sync: %v", err)
		}
	case <-s.done:
		s.stopOnce.Do(cancel) // already reported here; keep Stop quiet
		t.Fatalf("testcluster: kube-scheduler exited during startup: %v", s.runErr)
	}
	return s
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
		case <-s.done:
			if s.parentCtx.Err() == nil {
				s.t.Errorf("testcluster: kube-scheduler exited unexpectedly: %v", s.runErr)
			}
		default:
		}
		s.cancel()
	})
	<-s.done
}

// Done is closed once app.Run has returned.
func (s *Scheduler) Done() <-chan struct{} { return s.done }

func acquireSchedulerSlot() error {
	schedulerSlotMu.Lock()
	defer schedulerSlotMu.Unlock()
	if schedulerActive {
		return errors.New("another testcluster Scheduler is still running in this process; Stop it first")
	}
	schedulerActive = true
	return nil
}

func releaseSchedulerSlot() {
	schedulerSlotMu.Lock()
	defer schedulerSlotMu.Unlock()
	schedulerActive = false
}

// injectSchedulerConfig parses the caller's KubeSchedulerConfiguration YAML,
// fills in apiVersion/kind if missing, forces clientConnection.kubeconfig to
// kubeconfig and leaderElection.leaderElect to false, and re-encodes it.
func injectSchedulerConfig(config, kubeconfig string) ([]byte, error) {
	doc := map[string]any{}
	if err := yaml.Unmarshal([]byte(config), &doc); err != nil {
		return nil, fmt.Errorf("parsing KubeSchedulerConfiguration YAML: %w", err)
	}
	if doc == nil { // the document was empty or "null"
		doc = map[string]any{}
	}
	if _, ok := doc["apiVersion"]; !ok {
		doc["apiVersion"] = "kubescheduler.config.k8s.io/v1"
	}
	if _, ok := doc["kind"]; !ok {
		doc["kind"] = "KubeSchedulerConfiguration"
	}
	clientConnection, err := childMap(doc, "clientConnection")
	if err != nil {
		return nil, err
	}
	clientConnection["kubeconfig"] = kubeconfig
	leaderElection, err := childMap(doc, "leaderElection")
	if err != nil {
		return nil, err
	}
	leaderElection["leaderElect"] = false

	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding KubeSchedulerConfiguration: %w", err)
	}
	return out, nil
}

// childMap returns doc[key] as a map, creating it when absent or null.
func childMap(doc map[string]any, key string) (map[string]any, error) {
	switch v := doc[key].(type) {
	case nil:
		m := map[string]any{}
		doc[key] = m
		return m, nil
	case map[string]any:
		return v, nil
	default:
		return nil, fmt.Errorf("%s must be a mapping, got %T", key, v)
	}
}
