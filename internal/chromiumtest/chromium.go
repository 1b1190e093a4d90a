// Package chromiumtest runs Debian's headless Chromium for the tests and
// benchmarks that look at a page the way a person would: the simulator's
// HTML report and the GPU dashboard. .ci/run installs Chromium; elsewhere a
// test that needs it is skipped without it, unless CI is set.
package chromiumtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Path returns Chromium's path. Without Chromium it skips tb, or fails it
// when the CI environment variable is set.
func Path(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
		}
		tb.Skip("chromium is not installed (apt-get install chromium)")
	}
	return path
}

// Flags are the flags every run takes: headless, no sandbox (tests run as
// root in CI), software drawing, no scrollbars in screenshots, and a fresh
// profile in dir.
func Flags(dir string) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + dir}
}

// Run runs Chromium with Flags and args (a URL, --dump-dom, --screenshot=...)
// for at most two minutes, and returns its standard output. A failure ends
// tb with Chromium's standard error.
func Run(ctx context.Context, tb testing.TB, chromium string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "chromium-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cmd := exec.CommandContext(ctx, chromium, append(Flags(dir), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
