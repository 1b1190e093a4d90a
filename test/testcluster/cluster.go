// Package testcluster gives end-to-end tests a real, in-process Kubernetes
// control plane (embedded etcd plus kube-apiserver) and an in-process
// kube-scheduler that is built and run exactly like the production binary
// (k8s.io/kubernetes/cmd/kube-scheduler/app).
//
// Nothing but the API server and the scheduler run (StartWithControllers
// adds the workload controllers): there is no kubelet, and without the
// controllers no controller-manager and no service-account controller.
// Nodes are plain API objects created with [CreateNode]; pods are never
// started, a pod counts as scheduled once spec.nodeName is set.
//
// All listeners bind to 127.0.0.1 only. Everything a helper starts is stopped
// through t.Cleanup, in reverse start order (schedulers, then the API server,
// then etcd), so tests normally need no explicit teardown.
//
// Logging: by default klog is reduced to errors so that `go test -v` output
// stays readable. Set TESTCLUSTER_VERBOSE=1 to keep klog's settings untouched
// and to route the API server's contextual log output to t.Log.
package testcluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpusched/gpusched/internal/controlplane"
)

// VerboseEnv is the environment variable that, when non-empty, disables the
// log quieting this package applies by default.
const VerboseEnv = "TESTCLUSTER_VERBOSE"

// DefaultAPIServerFlags are always passed to the kube-apiserver, before any
// caller-supplied flags (a later occurrence of a flag overrides an earlier
// one). They are controlplane.DefaultAPIServerFlags: ServiceAccount and
// TaintNodesByCondition admission are disabled, as no controller creates
// ServiceAccounts or removes the not-ready taint.
var DefaultAPIServerFlags = controlplane.DefaultAPIServerFlags

// Cluster is a running control plane. All fields are set by Start and must be
// treated as read-only.
type Cluster struct {
	// Client is an admin (system:masters) clientset for the API server.
	Client kubernetes.Interface
	// RestConfig is the admin client configuration Client was built from.
	// Callers that modify it must copy it first (rest.CopyConfig).
	RestConfig *rest.Config
	// KubeconfigPath is a kubeconfig file (inside t.TempDir()) holding the
	// same admin credentials as RestConfig. It is what StartScheduler points
	// the kube-scheduler at.
	KubeconfigPath string
	// EtcdEndpoint is the client URL of the embedded etcd
	// (http://127.0.0.1:<port>).
	EtcdEndpoint string

	cp       *controlplane.ControlPlane
	t        *testing.T
	schedSeq int // number of schedulers started; names their config files
}

// Start brings up an embedded etcd and a kube-apiserver backed by it
// (internal/controlplane) and returns once the API server reports healthy
// and the "default" namespace exists. Any failure aborts the test with
// t.Fatal.
//
// apiserverFlags are extra kube-apiserver command line flags (for example
// "--feature-gates=..." or "--runtime-config=..."); they are applied after
// DefaultAPIServerFlags.
//
// Teardown is registered with t.Cleanup: the API server is stopped first,
// then etcd, then the data directory is removed. Start must be called from
// the test goroutine.
func Start(t *testing.T, apiserverFlags ...string) *Cluster {
	t.Helper()
	return start(t, false, apiserverFlags)
}

// StartWithFaults is Start with the control plane's fault injection on
// (controlplane.Options.Faults): RestartAPIServer and SetEtcdDelay work,
// and clients of RestConfig and KubeconfigPath outlive a restart.
func StartWithFaults(t *testing.T, apiserverFlags ...string) *Cluster {
	t.Helper()
	return start(t, true, apiserverFlags)
}

// RestartAPIServer stops the API server, cutting every connection, and
// starts a new one on the same etcd behind the same address; it returns
// once the new one is healthy. The cluster must come from StartWithFaults.
// Call it from the test goroutine.
func (c *Cluster) RestartAPIServer() {
	c.t.Helper()
	if err := c.cp.RestartAPIServer(); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
}

// SetEtcdDelay delays every request from the API server to etcd by d (0
// removes the delay). The cluster must come from StartWithFaults. It may be
// called from any goroutine.
func (c *Cluster) SetEtcdDelay(d time.Duration) {
	c.t.Helper()
	if err := c.cp.SetEtcdDelay(d); err != nil {
		c.t.Errorf("testcluster: %v", err)
	}
}

// StartWithControllers is Start with kube-controller-manager's workload
// controllers running beside the API server (controlplane.Controllers:
// Deployments, ReplicaSets, Jobs and StatefulSets get their pods, and a
// pod evicted or deleted is replaced), and ServiceAccount admission on, as
// in a real cluster.
func StartWithControllers(t *testing.T, apiserverFlags ...string) *Cluster {
	t.Helper()
	return startWith(t, controlplane.Options{Controllers: true,
		APIServerFlags: append(append([]string{}, controlplane.ControllerAPIServerFlags...), apiserverFlags...)})
}

func start(t *testing.T, faults bool, apiserverFlags []string) *Cluster {
	t.Helper()
	return startWith(t, controlplane.Options{Faults: faults,
		APIServerFlags: append(append([]string{}, DefaultAPIServerFlags...), apiserverFlags...)})
}

func startWith(t *testing.T, opts controlplane.Options) *Cluster {
	t.Helper()
	quietLogging()
	opts.Dir = t.TempDir()
	if verbose() {
		opts.Logf = t.Logf
	}
	cp, err := controlplane.Start(opts)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Cleanup(cp.Stop)

	c := &Cluster{
		Client:       cp.Client,
		RestConfig:   cp.RestConfig,
		EtcdEndpoint: cp.EtcdEndpoint,
		cp:           cp,
		t:            t,
	}
	c.KubeconfigPath = filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(c.KubeconfigPath); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return c
}

// WriteKubeconfig writes a kubeconfig file with the cluster's admin
// credentials (server URL, CA, TLS server name and bearer token) to path,
// with mode 0600. It can be called any number of times.
func (c *Cluster) WriteKubeconfig(path string) error {
	return c.cp.WriteKubeconfig(path)
}

func verbose() bool { return os.Getenv(VerboseEnv) != "" }

// quietLogging restricts klog's stderr output to errors, unless VerboseEnv is
// set. It changes process-global klog state, once.
func quietLogging() {
	if !verbose() {
		controlplane.QuietKlog("ERROR")
	}
}
