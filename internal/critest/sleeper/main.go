// Command sleeper is critest's sandbox (pause) image and the entrypoint of
// its test containers: it sleeps until SIGTERM or SIGINT. PID 1 of a PID
// namespace ignores signals it has no handler for, so it installs one to
// stop promptly.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	os.Exit(0)
}
