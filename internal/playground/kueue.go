package playground

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/gpusched/gpusched/pkg/extender"
)

// KueueNamespace is the namespace Kueue's manager runs for (its
// Configuration's namespace), as Kueue's own manifests name it.
const KueueNamespace = "kueue-system"

// A Kueue installation directory, as hack/install-kueue.sh writes it:
// the manager built from Kueue's Go module, and that module version's CRDs
// and webhook configurations.
const (
	kueueBinary   = "kueue"
	kueueCRDs     = "crd"
	kueueWebhooks = "webhook/manifests.yaml"
)

// kueueMetricsCerts is where Kueue's manager reads its metrics serving
// certificate when its internal certificate management is off, as in the
// playground; it is not configurable, and the manager exits without it.
const kueueMetricsCerts = "/etc/kueue/metrics/certs"

// kueueFrameworks are the workloads Kueue manages in the playground: Jobs,
// and Deployments through their pods.
var kueueFrameworks = []string{"batch/job", "pod", "deployment"}

// kueueFinalizer is the finalizer Kueue's ClusterQueue webhook adds.
const kueueFinalizer = "kueue.x-k8s.io/resource-in-use"

var clusterQueues = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}

// kueueManager is Kueue's manager running as a child process.
type kueueManager struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's exit, once done is closed
	log  string
}

// startKueue installs the CRDs and webhook configurations of the Kueue
// installation in dir on the playground's API server and runs its manager
// against it (the kubeconfig file), with a serving certificate made here
// for its webhooks on 127.0.0.1, leader election, metrics and the
// visibility server off. It returns once the manager answers its webhooks.
// Its log goes to logOut, or to a file in work that errors quote.
func startKueue(ctx context.Context, apply *applier, client kubernetes.Interface, kubeconfig, dir, work string, logOut io.Writer) (*kueueManager, error) {
	binary := filepath.Join(dir, kueueBinary)
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("--kueue %s: no Kueue manager there (%v); install one with: bash hack/install-kueue.sh", dir, err)
	}
	if _, err := os.Stat(filepath.Join(kueueMetricsCerts, "tls.crt")); err != nil {
		return nil, fmt.Errorf("Kueue's manager exits without a certificate in %s, even with its metrics off (%v); "+
			"run bash hack/install-kueue.sh once as root to write a placeholder", kueueMetricsCerts, err)
	}
	if info, err := client.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("the API server's version: %w", err)
	} else if _, err := version.ParseSemantic(info.GitVersion); err != nil {
		return nil, fmt.Errorf("Kueue's manager refuses the API server's version %q (%v): build the playground with "+
			"the version it runs, as make playground-kueue does: go run \"$(bash hack/version-ldflags.sh)\" ./cmd/gpusched-playground", info.GitVersion, err)
	}
	crds, err := filepath.Glob(filepath.Join(dir, kueueCRDs, "*.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("--kueue %s: no CRDs in %s; install Kueue with: bash hack/install-kueue.sh", dir, filepath.Join(dir, kueueCRDs))
	}
	var names []string
	for _, path := range crds {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var crd struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := utilyaml.Unmarshal(data, &crd); err != nil || crd.Metadata.Name == "" {
			return nil, fmt.Errorf("%s: not a CRD with a name (%v)", path, err)
		}
		names = append(names, crd.Metadata.Name)
		if err := apply.create(ctx, path, data); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	// Kueue's manager exits if any of its kinds is not served yet.
	for _, name := range names {
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := apply.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				if cm, _ := c.(map[string]any); cm["type"] == "Established" && cm["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("Kueue's CRD %s was not established: %w", name, err)
		}
	}
	apply.mapper.Reset()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}

	// The extender's certificate writer makes the same CA and serving pair
	// (tls.crt, tls.key) that Kueue's webhook server reads.
	certDir := filepath.Join(work, "certs")
	err = extender.WriteCertificates(certDir, extender.CertificateRequest{
		ServerNames: []string{"127.0.0.1", "localhost"}, ClientName: extender.DefaultClient, ValidFor: 365 * 24 * time.Hour})
	if err != nil {
		return nil, fmt.Errorf("Kueue's webhook certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(certDir, extender.CAFile))
	if err != nil {
		return nil, fmt.Errorf("Kueue's webhook certificate: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	webhookPort, healthPort := ports[0], ports[1]
	config := kueueConfig(webhookPort, healthPort, certDir)
	configPath := filepath.Join(work, "kueue-config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	hooks, err := os.ReadFile(filepath.Join(dir, kueueWebhooks))
	if err != nil {
		return nil, fmt.Errorf("--kueue %s: %w", dir, err)
	}
	hooks, err = webhooksAt(hooks, fmt.Sprintf("https://127.0.0.1:%d", webhookPort), caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, kueueWebhooks), err)
	}

	m := &kueueManager{done: make(chan struct{}), log: filepath.Join(work, "kueue.log")}
	if logOut == nil {
		f, err := os.Create(m.log)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child holds its own descriptor
		logOut = f
	} else {
		m.log = ""
	}
	m.cmd = exec.Command(binary, "--config="+configPath, "--feature-gates=VisibilityOnDemand=false")
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	m.cmd.Stdout, m.cmd.Stderr = logOut, logOut
	dieWithParent(m.cmd)
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting Kueue's manager: %w", err)
	}
	go func() { m.err = m.cmd.Wait(); close(m.done) }()

	// The webhook configurations only once the manager serves them: a pod
	// of a managed workload cannot be created while they point nowhere.
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-m.done:
			return false, fmt.Errorf("Kueue's manager exited: %v%s", m.err, m.logTail())
		default:
		}
		resp, err := http.Get(ready)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("Kueue's manager did not become ready: %w%s", err, m.logTail())
	}
	if err := apply.create(ctx, "Kueue's webhook configurations", hooks); err != nil {
		m.stop()
		return nil, err
	}
	// The API server loads new webhook configurations asynchronously: wait
	// until Kueue's own defaulting webhook adds its finalizer to a
	// ClusterQueue (dry run; the CRD's schema defaults other fields itself).
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": "gpusched-playground-probe"},
		"spec":     map[string]any{},
	}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := apply.dyn.Resource(clusterQueues).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		return slices.Contains(got.GetFinalizers(), kueueFinalizer), nil
	})
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("Kueue's webhooks do not answer: %w%s", err, m.logTail())
	}
	return m, nil
}

// stop ends the manager (SIGTERM, then SIGKILL after 10 s) and waits for it.
// If the playground dies without calling it, dieWithParent has the kernel
// end the manager (on Linux; the signal follows the OS thread that started
// it, which the Go runtime keeps while the program runs).
func (m *kueueManager) stop() {
	if m == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// Done is closed when the manager has exited.
func (m *kueueManager) Done() <-chan struct{} { return m.done }

// logTail is the end of the manager's log file, for errors; "" when it
// logs elsewhere.
func (m *kueueManager) logTail() string {
	if m.log == "" {
		return ""
	}
	data, err := os.ReadFile(m.log)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return "\nKueue's log ends:\n" + string(data)
}

// kueueConfig is the manager's Configuration: its webhooks served on
// 127.0.0.1 with the certificate in certDir, its health probes on
// 127.0.0.1, no metrics, no leader election (one manager), no internal
// certificate management (no Service to name), the playground's
// frameworks, and the API client rate of Kueue's own manifests
// (config/components/manager: 50 requests/s, bursts of 100; the built-in
// default is 20 and 30).
func kueueConfig(webhookPort, healthPort int, certDir string) string {
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
clientConnection:
  qps: 50
  burst: 100
internalCertManagement:
  enable: false
integrations:
  frameworks: [%s]
`, KueueNamespace, healthPort, webhookPort, certDir, strings.Join(kueueFrameworks, ", "))
}

// webhooksAt rewrites Kueue's webhook configurations (YAML documents) to
// call base (its path kept) instead of Kueue's Service, trusting caPEM, and
// returns them as JSON documents. Like Kueue's own installation, every
// webhook leaves kube-system and Kueue's namespace alone (a selector that
// cluster-scoped objects, Kueue's queues among them, always match).
func webhooksAt(manifests []byte, base string, caPEM []byte) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var out bytes.Buffer
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out.Bytes(), nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			hook, ok := h.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("a webhook is %T, not an object", h)
			}
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if path == "" {
				return nil, fmt.Errorf("webhook %v names no service path", hook["name"])
			}
			hook["clientConfig"] = map[string]any{"url": base + path, "caBundle": base64.StdEncoding.EncodeToString(caPEM)}
			if _, ok := hook["namespaceSelector"]; !ok {
				hook["namespaceSelector"] = map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{"kube-system", KueueNamespace}}}}
			}
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.Write(data)
		out.WriteByte('\n')
	}
}

// freePorts are n distinct TCP ports on 127.0.0.1 that were free a moment
// ago (held together while chosen, so never the same one twice).
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
