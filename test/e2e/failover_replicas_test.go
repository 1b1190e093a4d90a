package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Log lines of client-go's leader election (tools/leaderelection), which
// both gpusched and gpusched-extender print at the default verbosity.
const (
	logCampaigning = "Attempting to acquire leader lease"
	logAcquired    = "Successfully acquired lease"
	logRenewFailed = "Failed to renew lease"
)

// replicaSpec says how to run the processes of one replicated component.
type replicaSpec struct {
	// bin is the executable; args are its arguments for a slot (0 or 1),
	// the place in the set a replacement takes over from the process it
	// replaces, as a new pod of a ReplicaSet does.
	bin  string
	args func(slot int) []string
	// warm blocks until the process can take over at once: it has synced
	// its informers and campaigns for the lease. It returns an error if
	// the process exits first or ctx ends.
	warm func(ctx context.Context, r *replica) error
	// onWarm and onGone, when set, are called once the process is warm
	// and once it has exited (a Service adding and removing an endpoint).
	onWarm, onGone func(slot int)
}

// replica is one process of a replicaSet.
type replica struct {
	name    string // "<component>-<n>", n counting every process started
	slot    int
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has exited

	campaigning atomic.Bool  // it has logged logCampaigning
	warmNow     atomic.Bool  // spec.warm has returned nil and the process has not exited
	leading     atomic.Bool  // it has acquired the lease and not failed to renew it since
	acquiredAt  atomic.Int64 // Unix nanoseconds when its log said it acquired the lease

	mu   sync.Mutex // orders markWarm and markGone, so onWarm never follows onGone
	gone bool
}

// markWarm records that the process is warm and calls onWarm, unless it
// has exited already.
func (r *replica) markWarm(onWarm func(slot int)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return
	}
	r.warmNow.Store(true)
	if onWarm != nil {
		onWarm(r.slot)
	}
}

// markGone records that the process has exited and calls onGone.
func (r *replica) markGone(onGone func(slot int)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = true
	r.warmNow.Store(false)
	r.leading.Store(false)
	if onGone != nil {
		onGone(r.slot)
	}
}

// alive reports whether the process has not exited yet.
func (r *replica) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// scanLog copies the process's standard error to its log file and follows
// its leader election from the log lines.
func (r *replica) scanLog(stderr io.Reader, logFile io.Writer) {
	lines := bufio.NewScanner(stderr)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		fmt.Fprintln(logFile, line)
		switch {
		case strings.Contains(line, logCampaigning):
			r.campaigning.Store(true)
		case strings.Contains(line, logAcquired):
			r.acquiredAt.Store(time.Now().UnixNano())
			r.leading.Store(true)
		case strings.Contains(line, logRenewFailed):
			r.leading.Store(false)
		}
	}
	_, _ = io.Copy(logFile, stderr) // a line too long for the scanner
}

// replicaSet keeps two processes of a component running, as a Deployment
// with two replicas would: when one exits, killed by the test or on its
// own, a new process takes its slot at once.
type replicaSet struct {
	t    *testing.T
	name string
	spec replicaSpec
	dir  string

	mu       sync.Mutex
	stopping bool
	started  int
	all      []*replica // every process ever started, oldest first
	current  [2]*replica
	killed   map[*replica]bool
	// unexpected counts the processes that exited without being killed
	// by the test (a leader that could not renew its lease exits).
	unexpected int
}

// startReplicaSet starts two processes of spec; they are killed when the
// test ends.
func startReplicaSet(t *testing.T, name string, spec replicaSpec) *replicaSet {
	t.Helper()
	s := &replicaSet{t: t, name: name, spec: spec, dir: t.TempDir(), killed: map[*replica]bool{}}
	t.Cleanup(s.stop)
	for slot := range s.current {
		if err := s.start(slot); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// start runs a new process in slot and supervises it.
func (s *replicaSet) start(slot int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil
	}
	s.started++
	r := &replica{
		name:    fmt.Sprintf("%s-%d", s.name, s.started),
		slot:    slot,
		logPath: filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", s.name, s.started)),
		exited:  make(chan struct{}),
	}
	logFile, err := os.Create(r.logPath)
	if err != nil {
		return err
	}
	r.cmd = exec.Command(s.spec.bin, s.spec.args(slot)...)
	dieWithTest(r.cmd)
	r.cmd.Stdout = logFile
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return err
	}
	if err := r.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", r.name, err)
	}
	s.all = append(s.all, r)
	s.current[slot] = r
	go s.supervise(r, stderr, logFile)
	return nil
}

// supervise follows r until it exits, then starts its replacement.
func (s *replicaSet) supervise(r *replica, stderr io.Reader, logFile *os.File) {
	ctx, cancel := context.WithCancel(context.Background())
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		r.scanLog(stderr, logFile)
	}()
	go func() {
		if s.spec.warm(ctx, r) == nil {
			r.markWarm(s.spec.onWarm)
		}
	}()
	<-scanned // the pipe closes when the process exits
	err := r.cmd.Wait()
	logFile.Close()
	cancel()
	r.markGone(s.spec.onGone)
	close(r.exited)

	s.mu.Lock()
	stopping, killed := s.stopping, s.killed[r]
	if !stopping && !killed {
		s.unexpected++
	}
	s.mu.Unlock()
	if stopping {
		return
	}
	if !killed {
		s.t.Logf("%s exited on its own (%v); see %s", r.name, err, r.logPath)
	}
	if err := s.start(r.slot); err != nil {
		s.t.Errorf("replacing %s: %v", r.name, err)
	}
}

// kill sends SIGKILL to r and returns the moment it was sent. Its
// replacement starts as soon as it has exited.
func (s *replicaSet) kill(r *replica) time.Time {
	s.mu.Lock()
	s.killed[r] = true
	s.mu.Unlock()
	at := time.Now()
	if err := r.cmd.Process.Kill(); err != nil {
		s.t.Errorf("killing %s: %v", r.name, err)
	}
	return at
}

// replicas returns the processes that are running now.
func (s *replicaSet) replicas() []*replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*replica
	for _, r := range s.current {
		if r != nil && r.alive() {
			out = append(out, r)
		}
	}
	return out
}

// waitForLeader waits until exactly one running process other than except
// (nil: any) leads, and returns it with the moment its log said it
// acquired the lease. It fails the test after d.
func (s *replicaSet) waitForLeader(ctx context.Context, except *replica, d time.Duration) (*replica, time.Time) {
	s.t.Helper()
	var leader *replica
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, d, true, func(context.Context) (bool, error) {
		leader = nil
		for _, r := range s.replicas() {
			if r == except || !r.leading.Load() {
				continue
			}
			if leader != nil {
				return false, nil // two leaders for a moment: the old one has yet to notice
			}
			leader = r
		}
		return leader != nil, nil
	})
	if err != nil {
		s.t.Fatalf("no %s took the lease within %v\n%s", s.name, d, s.logTails(20))
	}
	return leader, time.Unix(0, leader.acquiredAt.Load())
}

// waitForWarmStandby waits until a running process other than leader is
// warm, so that a kill measures the hand-over and not a process's start.
func (s *replicaSet) waitForWarmStandby(ctx context.Context, leader *replica, d time.Duration) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, d, true, func(context.Context) (bool, error) {
		for _, r := range s.replicas() {
			if r != leader && r.warmNow.Load() {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatalf("no warm standby %s within %v\n%s", s.name, d, s.logTails(20))
	}
}

// unexpectedExits is the number of processes that exited on their own.
func (s *replicaSet) unexpectedExits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unexpected
}

// logTails returns the last n lines of every process's log, for a failure
// message.
func (s *replicaSet) logTails(n int) string {
	s.mu.Lock()
	all := append([]*replica(nil), s.all...)
	s.mu.Unlock()
	var b strings.Builder
	for _, r := range all {
		raw, _ := os.ReadFile(r.logPath)
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&b, "--- %s (slot %d, running %t), last %d lines of %s:\n%s\n", r.name, r.slot, r.alive(), len(lines), r.logPath, strings.Join(lines, "\n"))
	}
	return b.String()
}

// stop kills every process and waits until they have exited.
func (s *replicaSet) stop() {
	s.mu.Lock()
	s.stopping = true
	all := append([]*replica(nil), s.all...)
	s.mu.Unlock()
	for _, r := range all {
		if r.alive() {
			_ = r.cmd.Process.Kill()
		}
		<-r.exited
	}
	if s.t.Failed() {
		s.t.Logf("%s logs:\n%s", s.name, s.logTails(40))
	}
}

// buildCommand builds ./cmd/<name> into a temporary directory of the test
// and returns the executable's path.
func buildCommand(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	start := time.Now()
	command(t, nil, "go", "build", "-o", bin, "./cmd/"+name)
	t.Logf("built %s in %v", name, time.Since(start).Round(time.Second))
	return bin
}
