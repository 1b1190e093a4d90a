package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill cmd's process when the test binary
// exits, also when it exits without running its cleanups (a panic, or go
// test's -timeout), so that no replica outlives its API server.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
