// Package controlplane runs a Kubernetes control plane inside the calling
// process: an embedded etcd, a kube-apiserver backed by it, and on demand a
// kube-scheduler built exactly as the kube-scheduler command builds itself
// (k8s.io/kubernetes/cmd/kube-scheduler/app). The playground and the
// end-to-end tests both run on it.
//
// Every listener binds to 127.0.0.1. No kubelet runs: nodes and their pods'
// status are API objects that something else (a test, or simulated
// kubelets) keeps up to date. The workload controllers of
// kube-controller-manager (Deployment, ReplicaSet, Job, StatefulSet, garbage
// collector, namespace, ServiceAccount and its tokens) run in-process on
// demand (Options.Controllers); otherwise none does.
//
// With Options.Faults the control plane can misbehave on purpose, for chaos
// tests: RestartAPIServer stops the API server and starts a new one behind
// the same address, and SetEtcdDelay slows every request to etcd.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/kubernetes/test/utils/ktesting/initoption"
)

// DefaultAPIServerFlags are the kube-apiserver flags a control plane without
// controllers needs. Callers pass them first in Options.APIServerFlags (a
// later occurrence of a flag overrides an earlier one).
//
//   - ServiceAccount admission is disabled because no service-account
//     controller creates the "default" ServiceAccount, so every pod create
//     would be rejected.
//   - TaintNodesByCondition admission is disabled because it adds the
//     node.kubernetes.io/not-ready:NoSchedule taint on node creation and only
//     the (absent) node lifecycle controller would remove it.
var DefaultAPIServerFlags = []string{
	"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	"--endpoint-reconciler-type=none",
}

// Options configure Start.
type Options struct {
	// Dir holds etcd's data and the API server's scratch files. When empty,
	// Start creates a temporary directory and Stop removes it; a directory
	// the caller names is left in place.
	Dir string
	// APIServerFlags are the kube-apiserver's command line flags, usually
	// DefaultAPIServerFlags followed by the caller's own.
	APIServerFlags []string
	// Logf, when set, receives the API server's contextual log output and
	// etcd's errors. When nil they go to klog (see QuietKlog) and nowhere.
	Logf func(format string, args ...any)
	// Controllers runs the kube-controller-manager controllers that
	// workloads need (see Controllers) beside the API server, so that
	// Deployments, Jobs and StatefulSets get their pods, and namespaces
	// their "default" ServiceAccount. Pass ControllerAPIServerFlags instead
	// of DefaultAPIServerFlags to have ServiceAccount admission on. Off, no
	// controller runs: callers create Pods themselves.
	Controllers bool
	// Faults puts a loopback TCP front before etcd and one before the API
	// server, and gives the API server a certificate authority of its own,
	// so that RestartAPIServer and SetEtcdDelay work: clients reach the API
	// server at one address, with credentials that outlive a restart.
	Faults bool
}

// ControlPlane is a running etcd and kube-apiserver. The exported fields are
// set by Start and must be treated as read-only.
type ControlPlane struct {
	// Client is an admin (system:masters) clientset for the API server.
	Client kubernetes.Interface
	// RestConfig is the admin client configuration Client was built from.
	// Callers that modify it must copy it first (rest.CopyConfig).
	RestConfig *rest.Config
	// EtcdEndpoint is the client URL of the embedded etcd
	// (http://127.0.0.1:<port>).
	EtcdEndpoint string

	stopOnce sync.Once
	stops    []func() // run in reverse order by Stop

	// With Options.Faults: the fronts, and what RestartAPIServer needs to
	// start the API server again.
	apiFront, etcdFront *front
	restart             sync.Mutex // held while the API server restarts
	server              kubeapiservertesting.TestServer
	startServer         func() (kubeapiservertesting.TestServer, error)
}

// Start brings up an embedded etcd and a kube-apiserver backed by it, and
// returns once the API server reports healthy and the "default" namespace
// exists (about 3 s), and with Options.Controllers once the controllers run
// and default/default, the namespace's ServiceAccount, exists. On error everything started so far is stopped again.
// Call Stop to shut the control plane down.
func Start(opts Options) (_ *ControlPlane, err error) {
	c := &ControlPlane{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpusched-controlplane-"); err != nil {
			return nil, fmt.Errorf("creating a data directory: %w", err)
		}
		c.stops = append(c.stops, func() { os.RemoveAll(dir) })
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"), opts.Logf != nil)
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	c.stops = append(c.stops, etcd.Close) // Close blocks until etcd is down
	c.EtcdEndpoint = etcdURL

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{c.EtcdEndpoint}
	flags := opts.APIServerFlags
	var certs *pki
	if opts.Faults {
		if c.etcdFront, err = newFront(strings.TrimPrefix(c.EtcdEndpoint, "http://")); err != nil {
			return nil, fmt.Errorf("starting etcd's front: %w", err)
		}
		c.stops = append(c.stops, c.etcdFront.close)
		storage.Transport.ServerList = []string{"http://" + c.etcdFront.addr()}
		if certs, err = newPKI(filepath.Join(dir, "pki")); err != nil {
			return nil, fmt.Errorf("creating certificates: %w", err)
		}
		// The API server serves the pair it finds in --cert-dir
		// (apiserver.crt and apiserver.key) rather than a new one.
		flags = append(slices.Clone(flags), "--cert-dir="+certs.dir, "--client-ca-file="+certs.caFile)
	}
	instance := kubeapiservertesting.NewDefaultTestServerOptions()
	// The invariant checks run at teardown concern the API server's own
	// metrics, not what runs against it.
	instance.DisableInvariantChecks = true

	tb := newRunner(dir, opts.Logf)
	c.stops = append(c.stops, tb.cleanup)
	c.startServer = func() (kubeapiservertesting.TestServer, error) {
		return startAPIServer(tb, instance, flags, storage)
	}
	if c.server, err = c.startServer(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	c.stops = append(c.stops, c.stopAPIServer)

	c.RestConfig = rest.CopyConfig(c.server.ClientConfig)
	if opts.Faults {
		if c.apiFront, err = newFront(strings.TrimPrefix(c.server.ClientConfig.Host, "https://")); err != nil {
			return nil, fmt.Errorf("starting the API server's front: %w", err)
		}
		c.stops = append(c.stops, c.apiFront.close)
		c.RestConfig = &rest.Config{
			Host:  "https://" + c.apiFront.addr(),
			QPS:   c.server.ClientConfig.QPS,
			Burst: c.server.ClientConfig.Burst,
			TLSClientConfig: rest.TLSClientConfig{
				CAData: certs.caPEM, CertData: certs.clientCertPEM, KeyData: certs.clientKeyPEM,
			},
		}
	}
	if c.Client, err = kubernetes.NewForConfig(c.RestConfig); err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	if opts.Controllers {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		c.stops = append(c.stops, func() { cancel(); wg.Wait() })
		if err := startControllers(ctx, c.RestConfig, &wg); err != nil {
			return nil, fmt.Errorf("starting the controllers: %w", err)
		}
	}
	return c, nil
}

// startAPIServer runs StartTestServer, turning a Fatal on tb into an error.
func startAPIServer(tb *runner, instance *kubeapiservertesting.TestServerInstanceOptions, flags []string, storage *storagebackend.Config) (server kubeapiservertesting.TestServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(string(f))
		}
	}()
	tCtx := ktesting.Init(tb, initoption.PerTestOutput(tb.logf != nil))
	return kubeapiservertesting.StartTestServer(tCtx, instance, flags, storage)
}

// stopAPIServer stops the API server running now.
func (c *ControlPlane) stopAPIServer() {
	c.restart.Lock()
	defer c.restart.Unlock()
	if c.server.TearDownFn != nil {
		c.server.TearDownFn()
		c.server.TearDownFn = nil
	}
}

// RestartAPIServer stops the API server, as a crash would: every open
// connection is cut and new ones are refused. It then starts a new one on
// the same etcd and sends new connections to it, and returns once it is
// healthy (about 3 s later). Clients keep RestConfig: the address and the
// credentials stay valid. It needs Options.Faults.
func (c *ControlPlane) RestartAPIServer() error {
	if c.apiFront == nil {
		return errors.New("RestartAPIServer needs a control plane started with Options.Faults")
	}
	c.restart.Lock()
	defer c.restart.Unlock()
	c.apiFront.setBackend("")
	if c.server.TearDownFn != nil {
		c.server.TearDownFn()
		c.server.TearDownFn = nil
	}
	server, err := c.startServer()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	c.server = server
	c.apiFront.setBackend(strings.TrimPrefix(server.ClientConfig.Host, "https://"))
	return nil
}

// SetEtcdDelay delays everything the API server sends to etcd by d from
// now on (0 removes the delay): each request reaches etcd d later, as over
// a slow network or to a slow disk. It needs Options.Faults.
func (c *ControlPlane) SetEtcdDelay(d time.Duration) error {
	if c.etcdFront == nil {
		return errors.New("SetEtcdDelay needs a control plane started with Options.Faults")
	}
	c.etcdFront.setDelay(d)
	return nil
}

// Stop shuts the API server down, then etcd, and removes a temporary data
// directory. It blocks until they are down, is idempotent, and may be called
// on a partly started control plane.
func (c *ControlPlane) Stop() {
	c.stopOnce.Do(func() {
		for i := len(c.stops) - 1; i >= 0; i-- {
			c.stops[i]()
		}
	})
}

// WriteKubeconfig writes a kubeconfig file with the control plane's admin
// credentials (server URL, CA, TLS server name and bearer token) to path,
// with mode 0600. The file is valid while the control plane runs.
func (c *ControlPlane) WriteKubeconfig(path string) error {
	rc := c.RestConfig
	const name = "gpusched"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   rc.Host,
		CertificateAuthority:     rc.CAFile,
		CertificateAuthorityData: rc.CAData,
		TLSServerName:            rc.ServerName,
		InsecureSkipTLSVerify:    rc.Insecure,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token:                 rc.BearerToken,
		TokenFile:             rc.BearerTokenFile,
		ClientCertificate:     rc.CertFile,
		ClientCertificateData: rc.CertData,
		ClientKey:             rc.KeyFile,
		ClientKeyData:         rc.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
