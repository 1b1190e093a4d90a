package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/internal/schedconfig"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/test/testcluster"
)

// runMainEnv, when set, makes the test binary run main with its arguments:
// the documented commands run as a process of their own, as a user runs them.
const runMainEnv = "GPUSCHED_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestApplyKubeconfig: --kubeconfig, or else $KUBECONFIG, fills an empty
// clientConnection.kubeconfig of --config; a path the file sets wins; bad
// input is an error naming it.
func TestApplyKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: gpusched\n")
	own := write("own.yaml", "clientConnection:\n  kubeconfig: /etc/own\n")
	bad := write("bad.yaml", "clientConnection: 3\n")

	for _, tc := range []struct {
		name           string
		args           []string
		env            string
		wantKubeconfig string // in the configuration the scheduler reads; "-": no --config
		wantFlag       string // the --kubeconfig flag afterwards
		wantErr        string
	}{
		{name: "flag fills the file", args: []string{"--config", empty, "--kubeconfig", "/k/flag"}, env: "/k/env", wantKubeconfig: "/k/flag", wantFlag: "/k/flag"},
		{name: "env fills the file", args: []string{"--config", empty}, env: "/k/env", wantKubeconfig: "/k/env"},
		{name: "the file's own path wins", args: []string{"--config", own, "--kubeconfig", "/k/flag"}, wantKubeconfig: "/etc/own", wantFlag: "/k/flag"},
		{name: "nothing to fill", args: []string{"--config", empty}, wantKubeconfig: ""},
		{name: "env without --config sets the flag", env: "/k/env", wantKubeconfig: "-", wantFlag: "/k/env"},
		{name: "flag without --config is kept", args: []string{"--kubeconfig", "/k/flag"}, wantKubeconfig: "-", wantFlag: "/k/flag"},
		{name: "env lists files", args: []string{"--config", empty}, env: "/a" + string(os.PathListSeparator) + "/b", wantErr: "$KUBECONFIG lists several files"},
		{name: "missing --config", args: []string{"--config", filepath.Join(dir, "absent.yaml"), "--kubeconfig", "/k"}, wantErr: "reading --config"},
		{name: "clientConnection not a mapping", args: []string{"--config", bad, "--kubeconfig", "/k"}, wantErr: "clientConnection must be a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newCommand().Flags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cleanup, err := applyKubeconfig(fs, tc.env)
			defer cleanup()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fs.Lookup("kubeconfig").Value.String(); got != tc.wantFlag {
				t.Errorf("--kubeconfig %q, want %q", got, tc.wantFlag)
			}
			config := fs.Lookup("config").Value.String()
			if tc.wantKubeconfig == "-" {
				if config != "" {
					t.Errorf("--config %q, want none", config)
				}
				return
			}
			raw, err := os.ReadFile(config)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := schedconfig.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := doc.Kubeconfig(); got != tc.wantKubeconfig {
				t.Errorf("clientConnection.kubeconfig %q, want %q", got, tc.wantKubeconfig)
			}
			if profiles, _ := doc["profiles"].([]any); tc.args[1] == empty && len(profiles) != 1 {
				t.Errorf("profiles %v, want the file's one", doc["profiles"])
			}
		})
	}
	if got := newCommand().Flags().Lookup("kubeconfig").Usage; !strings.Contains(got, "With --config it fills") {
		t.Errorf("--help for --kubeconfig does not say it counts with --config: %q", got)
	}
}

// TestDocumentedCommands runs the README's commands as written, against a
// real API server: `gpusched --config examples/<config> --kubeconfig <file>`
// (and the same with $KUBECONFIG instead of the flag), after `kubectl apply`
// of the PodGroup CRD for the gang configuration. Each must schedule a GPU
// pod. Only --bind-address and --secure-port are added, to keep the health
// port on loopback and free.
func TestDocumentedCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := testcluster.Start(t)
	testcluster.CreateNode(ctx, t, c.Client, gt.MakeGPUNode("a100-0").GFD("NVIDIA-A100-SXM4-80GB", 8, 81920).Obj())
	kubectl := exec.CommandContext(ctx, "kubectl", "--kubeconfig", c.KubeconfigPath, "apply", "-f", "../../deploy/crds/scheduling.x-k8s.io_podgroups.yaml")
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply of the PodGroup CRD: %v\n%s", err, out)
	}

	for i, tc := range []struct {
		name   string
		config string
		viaEnv bool
	}{
		{"config --kubeconfig", "gpusched-config.yaml", false},
		{"gang config --kubeconfig", "gpusched-gang-config.yaml", false},
		{"config with KUBECONFIG", "gpusched-config.yaml", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--config", filepath.Join("..", "..", "examples", tc.config)}
			env := append(os.Environ(), runMainEnv+"=1", "KUBECONFIG=")
			if tc.viaEnv {
				env[len(env)-1] = "KUBECONFIG=" + c.KubeconfigPath
			} else {
				args = append(args, "--kubeconfig", c.KubeconfigPath)
			}
			args = append(args, "--bind-address=127.0.0.1", "--secure-port=0")
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = env
			var output bytes.Buffer
			cmd.Stdout, cmd.Stderr = &output, &output
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(exited) }()
			// stop ends gpusched with SIGTERM, on which it releases its
			// Lease so that the next one takes it at once, and returns its
			// output.
			stop := func() string {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				return output.String()
			}
			defer stop()

			name := fmt.Sprintf("pod-%d", i)
			pod := gt.MakeGPUPod(name).SchedulerName("gpusched").GPUs(1).Obj()
			pod.UID = ""
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var node string
			err := wait.PollUntilContextTimeout(ctx, testcluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
				select {
				case <-exited:
					return false, fmt.Errorf("gpusched exited: %v", waitErr)
				default:
				}
				got, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				node = got.Spec.NodeName
				return node != "", nil
			})
			if err != nil {
				t.Fatalf("pod %s not scheduled: %v\n%s", name, err, stop())
			}
			if node != "a100-0" {
				t.Errorf("placed on %q", node)
			}
		})
	}
}
