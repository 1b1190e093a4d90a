//go:build !linux

package playground

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal: stop the playground with Ctrl-C, which stops Kueue's manager.
func dieWithParent(*exec.Cmd) {}
