// Package critest runs a real containerd 2.x (CRI plugin, NRI enabled, runc)
// as root for a test, with its own root, state, sockets and config under a
// temporary directory, and drives it over CRI gRPC. Tests use it to check what
// an NRI plugin's adjustments turn into in the final OCI spec of a created
// container.
//
// Set CRITEST_LOG=1 to have containerd's whole (debug) log in the test
// output; a failed test gets its tail anyway.
//
// It needs root, bin/containerd, bin/ctr and bin/containerd-shim-runc-v2 at
// the module root (installed by .ci/containerd.sh), runc on PATH (Debian's
// package) and the go command (to build the image's static sleeper) or
// CRITEST_SLEEPER naming a prebuilt static one; CRITEST_BIN_DIR may name
// another directory of containerd's binaries, CRITEST_SNAPSHOTTER another
// default snapshotter than overlayfs. Without them Start skips the
// test, except under CI=true where it fails it.
//
// Images cannot be pulled: ImportImage builds a one-layer OCI image in Go and
// imports it with `ctr images import`; the same kind of image is the pinned
// sandbox (pause) image. Sandboxes use the host network, so no CNI is needed.
package critest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PauseImage is the ref of the pinned sandbox image every Runtime imports.
const PauseImage = "critest.local/gpusched/pause:1"

// DefaultPath is the PATH every image built here has in its config Env.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Option configures Start.
type Option func(*config)

type config struct {
	requiredPlugins   []string
	tolerateMissing   string
	snapshotter       string
	validator         bool
	extraContainerdCf string
}

// WithRequiredPlugins enables NRI's built-in default validator with these
// globally required plugins (by plugin name, e.g. "gpusched"): creating a
// container then fails unless each of them is connected.
func WithRequiredPlugins(names ...string) Option {
	return func(c *config) { c.validator = true; c.requiredPlugins = append(c.requiredPlugins, names...) }
}

// WithDefaultValidator enables NRI's built-in default validator without
// globally required plugins; pods can still require plugins with the
// annotation "required-plugins.noderesource.dev" (a YAML list of names, or
// per container "required-plugins.noderesource.dev/container.<name>").
func WithDefaultValidator() Option { return func(c *config) { c.validator = true } }

// WithTolerateMissingAnnotation sets the default validator's
// tolerate_missing_plugins_annotation (a pod/container annotation key whose
// value "true" waives the required plugins).
func WithTolerateMissingAnnotation(key string) Option {
	return func(c *config) { c.validator = true; c.tolerateMissing = key }
}

// WithSnapshotter picks containerd's snapshotter ("overlayfs", the default,
// or "native").
func WithSnapshotter(name string) Option { return func(c *config) { c.snapshotter = name } }

// WithExtraConfig appends raw TOML to the generated config.toml.
func WithExtraConfig(toml string) Option {
	return func(c *config) { c.extraContainerdCf += "\n" + toml + "\n" }
}

// Runtime is one running containerd.
type Runtime struct {
	// Runtime and Image are CRI clients on the containerd socket.
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient

	dir, sock, nriSock, cdiDir, logPath, configPath string
	binDir, ctrBin, pauseBin                        string
	snapshotter                                     string
	cmd                                             *exec.Cmd
	exited                                          chan struct{}
	conn                                            *grpc.ClientConn

	mu        sync.Mutex
	sandboxes map[string]*runtimeapi.PodSandboxConfig
	images    map[string]bool
}

// Socket is containerd's gRPC (CRI) socket.
func (r *Runtime) Socket() string { return r.sock }

// NRISocket is the socket NRI plugins connect to.
func (r *Runtime) NRISocket() string { return r.nriSock }

// CDIDir is a CDI spec directory containerd reads (enable_cdi is on).
func (r *Runtime) CDIDir() string { return r.cdiDir }

// Dir is the temporary directory holding everything of this Runtime.
func (r *Runtime) Dir() string { return r.dir }

// ConfigPath is the generated config.toml.
func (r *Runtime) ConfigPath() string { return r.configPath }

// Log returns containerd's log so far.
func (r *Runtime) Log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}

// missing skips the test, or fails it under CI=true, for a missing tool.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("critest: %s (CI=true: a missing tool is a failure; run .ci/containerd.sh)", msg)
	}
	t.Skipf("critest: %s (run .ci/containerd.sh as root to install containerd and runc)", msg)
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("no go.mod above the working directory")
		}
		d = p
	}
}

// BinDir is where containerd, ctr and the shim are looked for: $CRITEST_BIN_DIR
// or <module root>/bin.
func BinDir() string {
	if d := os.Getenv("CRITEST_BIN_DIR"); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	root, err := moduleRoot()
	if err != nil {
		return "bin"
	}
	return filepath.Join(root, "bin")
}

// Start starts containerd for the test and stops it (removing every sandbox
// it made) when the test ends.
func Start(t testing.TB, opts ...Option) *Runtime {
	t.Helper()
	cfg := config{snapshotter: "overlayfs"}
	if s := os.Getenv("CRITEST_SNAPSHOTTER"); s != "" {
		cfg.snapshotter = s // where /tmp cannot hold overlay mounts
	}
	for _, o := range opts {
		o(&cfg)
	}
	if runtime.GOOS != "linux" {
		t.Skip("critest: containerd with runc needs Linux")
	}
	if os.Geteuid() != 0 {
		missing(t, "containerd must run as root (euid %d)", os.Geteuid())
	}
	binDir := BinDir()
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing(t, "%s not found in %s", b, binDir)
		}
	}
	runcPath, err := exec.LookPath("runc")
	if err != nil {
		missing(t, "runc not on PATH")
	}
	// A prebuilt static sleeper (for machines without the go command),
	// else one built here.
	sleeper := os.Getenv("CRITEST_SLEEPER")
	if sleeper == "" {
		if _, err := GoCommand(); err != nil {
			missing(t, "%v (needed to build the image's sleeper; or set CRITEST_SLEEPER to a static sleeper)", err)
		}
	}

	// Short paths: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "crit")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{
		dir:         dir,
		sock:        filepath.Join(dir, "c.sock"),
		nriSock:     filepath.Join(dir, "nri.sock"),
		cdiDir:      filepath.Join(dir, "cdi"),
		logPath:     filepath.Join(dir, "containerd.log"),
		configPath:  filepath.Join(dir, "config.toml"),
		binDir:      binDir,
		ctrBin:      filepath.Join(binDir, "ctr"),
		snapshotter: cfg.snapshotter,
		exited:      make(chan struct{}),
		sandboxes:   map[string]*runtimeapi.PodSandboxConfig{},
		images:      map[string]bool{},
	}
	t.Cleanup(func() { r.stop(t) })
	for _, d := range []string{"root", "state", "cdi", "nri/plugins", "nri/conf", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	if sleeper != "" {
		r.pauseBin = sleeper
	} else {
		root, err := moduleRoot()
		if err != nil {
			t.Fatalf("critest: %v", err)
		}
		r.pauseBin = BuildStatic(t, filepath.Join(root, "internal", "critest", "sleeper"), dir)
		t.Logf("critest: built the sleeper in %v", time.Since(start).Round(time.Millisecond))
	}

	if err := os.WriteFile(r.configPath, []byte(r.configTOML(cfg, runcPath)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r.cmd = exec.Command(filepath.Join(binDir, "containerd"), "--config", r.configPath, "--log-level", "debug")
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	// The shim is found on PATH.
	r.cmd.Env = append(os.Environ(), "PATH="+binDir+":"+filepath.Dir(runcPath)+":"+os.Getenv("PATH"))
	// Its own process group (a ^C to the test does not reach it first); told
	// to stop if the test process dies without cleaning up.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("critest: start containerd: %v", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()

	r.conn, err = grpc.NewClient("unix://"+r.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.Runtime = runtimeapi.NewRuntimeServiceClient(r.conn)
	r.Image = runtimeapi.NewImageServiceClient(r.conn)
	if err := r.waitReady(30 * time.Second); err != nil {
		t.Fatalf("critest: containerd not ready: %v\n%s", err, tail(r.Log(), 60))
	}
	t.Logf("critest: containerd ready in %v (dir %s)", time.Since(start).Round(time.Millisecond), dir)

	r.importImage(t, PauseImage, []string{DefaultPath})
	return r
}

// configTOML is containerd's config (version 3, containerd 2.x).
func (r *Runtime) configTOML(cfg config, runcPath string) string {
	q := strconv.Quote
	list := func(xs []string) string {
		qs := make([]string, len(xs))
		for i, x := range xs {
			qs[i] = q(x)
		}
		return "[" + strings.Join(qs, ", ") + "]"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `version = 3
root = %s
state = %s
# Plugins a CRI+runc+NRI test never uses.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = %s
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %s

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  disable_apparmor = true
  # Keep oom_score_adj no lower than containerd's own: lowering it needs
  # CAP_SYS_RESOURCE, which root lacks in some sandboxes (runc then fails with
  # "failed to update /proc/self/oom_score_adj: Permission denied").
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = [%s]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = %s
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %s
        Root = %s
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%s]
    conf_dir = %s

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

# ctr images import unpacks through the transfer service, into the
# snapshotter CRI uses.
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = %s
  snapshotter = %s

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %s
  plugin_path = %s
  plugin_config_path = %s
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "5s"
`,
		q(filepath.Join(r.dir, "root")), q(filepath.Join(r.dir, "state")),
		q(r.sock), q(r.sock+".ttrpc"),
		q(cfg.snapshotter), q(PauseImage),
		q(r.cdiDir), q(cfg.snapshotter), q(runcPath), q(filepath.Join(r.dir, "runc")),
		q(filepath.Join(r.dir, "cni/bin")), q(filepath.Join(r.dir, "cni/conf")),
		q("linux/"+runtime.GOARCH), q(cfg.snapshotter),
		q(r.nriSock), q(filepath.Join(r.dir, "nri/plugins")), q(filepath.Join(r.dir, "nri/conf")))
	if cfg.validator {
		fmt.Fprintf(&b, `  [plugins."io.containerd.nri.v1.nri".default_validator]
    enable = true
    required_plugins = %s
`, list(cfg.requiredPlugins))
		if cfg.tolerateMissing != "" {
			fmt.Fprintf(&b, "    tolerate_missing_plugins_annotation = %s\n", q(cfg.tolerateMissing))
		}
	}
	b.WriteString(cfg.extraContainerdCf)
	return b.String()
}

func (r *Runtime) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return fmt.Errorf("containerd exited: %v", r.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := r.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		cancel()
		if err == nil {
			for _, c := range resp.GetStatus().GetConditions() {
				if c.Type == runtimeapi.RuntimeReady && c.Status {
					return nil
				}
			}
			last = fmt.Errorf("RuntimeReady not true: %v", resp.GetStatus())
		} else {
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// ImportImage builds a one-layer image (the sleeper as its entrypoint) whose
// config Env is PATH plus env, imports it and returns its ref.
func (r *Runtime) ImportImage(t testing.TB, env []string) string {
	t.Helper()
	full := append([]string{DefaultPath}, env...)
	h := sha256.Sum256([]byte(strings.Join(full, "\x00")))
	ref := "critest.local/gpusched/img:" + hex.EncodeToString(h[:6])
	r.importImage(t, ref, full)
	return ref
}

func (r *Runtime) importImage(t testing.TB, ref string, env []string) {
	t.Helper()
	r.mu.Lock()
	done := r.images[ref]
	r.mu.Unlock()
	if done {
		return
	}
	bin, err := os.ReadFile(r.pauseBin)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := ociArchive(ref, []imageFile{{path: "/pause", mode: 0o755, data: bin}}, env, []string{"/pause"})
	if err != nil {
		t.Fatal(err)
	}
	r.importArchive(t, ref, archive)
}

// importArchive imports an OCI archive of the image ref and waits until CRI
// sees it.
func (r *Runtime) importArchive(t testing.TB, ref string, archive []byte) {
	t.Helper()
	tarPath := filepath.Join(r.dir, "image.tar")
	if err := os.WriteFile(tarPath, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(r.ctrBin, "--address", r.sock, "--namespace", "k8s.io",
		"images", "import", "--snapshotter", r.snapshotter, "--platform", "linux/"+runtime.GOARCH, tarPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("critest: ctr images import %s: %v\n%s\n%s", ref, err, out, tail(r.Log(), 40))
	}
	// CRI learns of the image from containerd's events: wait until it sees it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := r.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		cancel()
		if err == nil && resp.GetImage() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("critest: CRI does not see imported image %s: %v\n%s", ref, err, tail(r.Log(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.mu.Lock()
	r.images[ref] = true
	r.mu.Unlock()
}

// hostNamespaces is the sandbox's and its containers' namespaces: the node's
// network (no CNI), the pod's IPC and each container's own PID namespace.
func hostNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// RunSandbox runs a hostNetwork pod sandbox and returns its ID.
func (r *Runtime) RunSandbox(t testing.TB, name, namespace string, annotations map[string]string) string {
	t.Helper()
	uid := sha256.Sum256([]byte(namespace + "/" + name + "/" + strconv.FormatInt(time.Now().UnixNano(), 10)))
	logDir := filepath.Join(r.dir, "logs", namespace+"_"+name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: name, Namespace: namespace, Uid: hex.EncodeToString(uid[:16]),
		},
		LogDirectory: logDir,
		Labels:       map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace},
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: hostNamespaces()},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := r.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("critest: RunPodSandbox %s/%s: %v\n%s", namespace, name, err, tail(r.Log(), 60))
	}
	r.mu.Lock()
	r.sandboxes[resp.PodSandboxId] = cfg
	r.mu.Unlock()
	return resp.PodSandboxId
}

// KeyValue is one CRI environment variable.
type KeyValue = runtimeapi.KeyValue

// Env returns the CRI environment variable key=value.
func Env(key, value string) *KeyValue { return &KeyValue{Key: key, Value: []byte(value)} }

// CreateContainer creates (does not start) a container from image in the
// sandbox, with the CRI env, annotations and CDI devices (fully qualified
// names, e.g. "nvidia.com/gpu=0") given. The error is CRI's, e.g. an NRI
// plugin's or validator's refusal.
func (r *Runtime) CreateContainer(t testing.TB, sandboxID, name, image string, env []*KeyValue, annotations map[string]string, cdiDevices []string) (string, error) {
	t.Helper()
	r.mu.Lock()
	sb := r.sandboxes[sandboxID]
	r.mu.Unlock()
	if sb == nil {
		t.Fatalf("critest: unknown sandbox %s", sandboxID)
	}
	var cdi []*runtimeapi.CDIDevice
	for _, d := range cdiDevices {
		cdi = append(cdi, &runtimeapi.CDIDevice{Name: d})
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: image},
		Envs:        env,
		Annotations: annotations,
		Labels:      map[string]string{"io.kubernetes.container.name": name},
		LogPath:     name + ".log",
		CDIDevices:  cdi,
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: hostNamespaces()},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := r.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID, Config: cfg, SandboxConfig: sb,
	})
	if err != nil {
		return "", err
	}
	return resp.ContainerId, nil
}

// StartContainer starts a created container: runc applies its spec (the
// device cgroup among it) and runs its entrypoint. The error is CRI's.
func (r *Runtime) StartContainer(t testing.TB, containerID string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	return err
}

// RemoveContainer removes a container (stopping it first if it runs).
func (r *Runtime) RemoveContainer(t testing.TB, containerID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		t.Fatalf("critest: RemoveContainer %s: %v", containerID, err)
	}
}

// Spec returns the OCI runtime spec containerd stored for the container (the
// one runc gets at start), from CRI's verbose ContainerStatus info.
func (r *Runtime) Spec(t testing.TB, containerID string) *specs.Spec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: true})
	if err != nil {
		t.Fatalf("critest: ContainerStatus %s: %v", containerID, err)
	}
	var info struct {
		RuntimeSpec *specs.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("critest: ContainerStatus %s info: %v\n%s", containerID, err, resp.GetInfo()["info"])
	}
	if info.RuntimeSpec == nil {
		t.Fatalf("critest: ContainerStatus %s info has no runtimeSpec:\n%s", containerID, resp.GetInfo()["info"])
	}
	return info.RuntimeSpec
}

// stop removes every sandbox, stops containerd, ends shims it left, unmounts
// whatever is still mounted under the directory and removes it.
func (r *Runtime) stop(t testing.TB) {
	if r.logPath != "" {
		if os.Getenv("CRITEST_LOG") != "" {
			t.Logf("critest: containerd log:\n%s", r.Log())
		} else if t.Failed() {
			t.Logf("critest: containerd log tail:\n%s", tail(r.Log(), 80))
		}
	}
	if r.cmd != nil && r.cmd.Process != nil {
		select {
		case <-r.exited:
		default:
			r.mu.Lock()
			ids := make([]string, 0, len(r.sandboxes))
			for id := range r.sandboxes {
				ids = append(ids, id)
			}
			r.mu.Unlock()
			for _, id := range ids {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if _, err := r.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
					t.Logf("critest: StopPodSandbox %s: %v", id, err)
				}
				if _, err := r.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
					t.Logf("critest: RemovePodSandbox %s: %v", id, err)
				}
				cancel()
			}
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(10 * time.Second):
				_ = r.cmd.Process.Kill()
				<-r.exited
			}
		}
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.killShims(t)
	unmountUnder(t, r.dir)
	if err := os.RemoveAll(r.dir); err != nil {
		t.Logf("critest: remove %s: %v", r.dir, err)
	}
}

// killShims ends, by PID, the shims this containerd started (their command
// line names its socket) that are still running.
func (r *Runtime) killShims(t testing.TB) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cl), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" || !bytes.Contains(cl, []byte(r.sock)) {
			continue
		}
		t.Logf("critest: killing leftover shim %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(t testing.TB, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("critest: unmount %s: %v", p, err)
		}
	}
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 600 {
			lines[i] = l[:600] + "…"
		}
	}
	return strings.Join(lines, "\n")
}
