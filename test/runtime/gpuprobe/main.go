// Command gpuprobe runs inside a test container and reports, as one JSON
// object on stdout, which NVIDIA device nodes the container can open:
//
//   - "nodes": every /dev/nvidia* node present in the container, with "ok"
//     or the error open(2) gave;
//   - "made": for each minor in $PROBE_MINORS (comma-separated) whose node is
//     not present, the result of making /dev/probe-gpu<minor> (c 195:<minor>)
//     and opening it: what a tenant with CAP_MKNOD gets when it makes its
//     own node for a GPU it was not given;
//   - "env": the container's NVIDIA_VISIBLE_DEVICES values.
//
// A denied node fails with "operation not permitted" (the device cgroup);
// an allowed node of a GPU this machine does not have fails with "no such
// device or address" (past the cgroup, no driver behind it).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	report := map[string]any{}
	nodes := map[string]string{}
	paths, _ := filepath.Glob("/dev/nvidia*")
	for _, p := range paths {
		nodes[p] = tryOpen(p)
	}
	report["nodes"] = nodes

	made := map[string]string{}
	for _, s := range strings.Split(os.Getenv("PROBE_MINORS"), ",") {
		minor, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/dev/nvidia%d", minor)); err == nil {
			continue
		}
		p := fmt.Sprintf("/dev/probe-gpu%d", minor) // /dev is the container's own tmpfs
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
			made[strconv.Itoa(minor)] = "mknod: " + err.Error()
			continue
		}
		made[strconv.Itoa(minor)] = tryOpen(p)
	}
	report["made"] = made

	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
			env = append(env, v)
		}
	}
	report["env"] = env
	_ = json.NewEncoder(os.Stdout).Encode(report)
}

// tryOpen opens path read-write and reports "ok" or the error's text.
func tryOpen(path string) string {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok {
			return pe.Err.Error()
		}
		return err.Error()
	}
	f.Close()
	return "ok"
}
