package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// runner is the ktesting.TB the API server is started with outside a test:
// it owns cleanups and temporary directories, sends log lines to logf, and
// turns a fatal error into a panic that startAPIServer recovers as an error.
// Test-only operations (Skip, Setenv, Chdir) are refused by panicking, which
// no code path of the API server's start takes.
type runner struct {
	dir  string
	logf func(format string, args ...any) // nil: discard

	mu       sync.Mutex
	cleanups []func()
	tmpSeq   int
	failed   bool
}

// fatal is the panic value of runner.Fatal and runner.FailNow.
type fatal string

func newRunner(dir string, logf func(string, ...any)) *runner {
	return &runner{dir: dir, logf: logf}
}

// cleanup runs the registered cleanups, last registered first.
func (r *runner) cleanup() {
	r.mu.Lock()
	cleanups := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runner) Log(args ...any) { r.Logf("%s", fmt.Sprintln(args...)) }

func (r *runner) Logf(format string, args ...any) {
	if r.logf != nil {
		r.logf(format, args...)
	}
}

func (r *runner) Error(args ...any) {
	r.Log(args...)
	r.Fail()
}

func (r *runner) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.Fail()
}

func (r *runner) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *runner) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *runner) FailNow()          { r.Fail(); panic(fatal("fatal error")) }
func (r *runner) Fatal(args ...any) { r.Fail(); panic(fatal(fmt.Sprint(args...))) }
func (r *runner) Fatalf(format string, args ...any) {
	r.Fail()
	panic(fatal(fmt.Sprintf(format, args...)))
}
func (r *runner) Helper()                {}
func (r *runner) Name() string           { return "gpusched-controlplane" }
func (r *runner) Attr(key, value string) {}

// TempDir returns a new directory under the control plane's data directory.
func (r *runner) TempDir() string {
	r.mu.Lock()
	r.tmpSeq++
	dir := filepath.Join(r.dir, "tmp-"+strconv.Itoa(r.tmpSeq))
	r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.Fatalf("creating a temporary directory: %v", err)
	}
	return dir
}

func (r *runner) Setenv(key, value string) { panic("controlplane: Setenv is not supported") }
func (r *runner) Chdir(dir string)         { panic("controlplane: Chdir is not supported") }
func (r *runner) Skip(args ...any)         { panic("controlplane: Skip is not supported") }
func (r *runner) Skipf(string, ...any)     { panic("controlplane: Skip is not supported") }
func (r *runner) SkipNow()                 { panic("controlplane: Skip is not supported") }
func (r *runner) Skipped() bool            { return false }
