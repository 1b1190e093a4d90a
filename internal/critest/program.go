package critest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GoCommand is the go command that builds test programs: the one on PATH,
// else the one of the toolchain that built the test.
func GoCommand() (string, error) {
	if goBin, err := exec.LookPath("go"); err == nil {
		return goBin, nil
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		return "", fmt.Errorf("go command not found")
	}
	return goBin, nil
}

// BuildStatic builds the main package at pkgDir (a directory of this module)
// into a static binary under dir, for an image made by ImportProgram.
func BuildStatic(t testing.TB, pkgDir, dir string) string {
	t.Helper()
	goBin, err := GoCommand()
	if err != nil {
		missing(t, "%v (needed to build %s)", err, pkgDir)
	}
	out := filepath.Join(dir, filepath.Base(pkgDir))
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = pkgDir
	// The test's own GOFLAGS (-race, say) do not apply to a static helper,
	// and no toolchain is fetched for it.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("critest: go build %s: %v\n%s", pkgDir, err, b)
	}
	return out
}

// ImportProgram builds a one-layer image whose entrypoint is the static
// binary at path (as /program), with config Env PATH plus env, imports it
// and returns its ref.
func (r *Runtime) ImportProgram(t testing.TB, path string, env []string) string {
	t.Helper()
	bin, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{DefaultPath}, env...)
	h := sha256.New()
	h.Write(bin)
	h.Write([]byte(strings.Join(full, "\x00")))
	ref := "critest.local/gpusched/program:" + hex.EncodeToString(h.Sum(nil)[:6])
	r.mu.Lock()
	done := r.images[ref]
	r.mu.Unlock()
	if !done {
		archive, err := ociArchive(ref, []imageFile{{path: "/program", mode: 0o755, data: bin}}, full, []string{"/program"})
		if err != nil {
			t.Fatal(err)
		}
		r.importArchive(t, ref, archive)
	}
	return ref
}

// WaitExited waits until the started container exits and returns its exit
// code and what it wrote to stdout.
func (r *Runtime) WaitExited(t testing.TB, containerID string, timeout time.Duration) (int32, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := r.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
		cancel()
		if err != nil {
			t.Fatalf("critest: ContainerStatus %s: %v", containerID, err)
		}
		if st := resp.GetStatus(); st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st.GetExitCode(), r.stdout(t, st.GetLogPath())
		}
		if time.Now().After(deadline) {
			t.Fatalf("critest: container %s did not exit within %v", containerID, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stdout reads a CRI container log ("<time> <stream> <P|F> <text>" lines)
// and returns the stdout text.
func (r *Runtime) stdout(t testing.TB, logPath string) string {
	t.Helper()
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("critest: container log: %v", err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) < 3 || f[1] != "stdout" {
			continue
		}
		if len(f) == 4 {
			out.WriteString(f[3])
		}
		if f[2] == "F" {
			out.WriteByte('\n')
		}
	}
	return out.String()
}
