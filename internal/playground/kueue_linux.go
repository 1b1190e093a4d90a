package playground

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the playground's
// dies without stopping it (SIGKILL, a crash): Kueue's manager must not
// outlive the API server it serves.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
